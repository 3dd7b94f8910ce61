//! The engines' own control routes, which the front door never forwards from a client:
//! they sleep and wake a model, free or reset its memory, swap its weights or adapters,
//! pause it or run arbitrary calls in its workers (vLLM's `/collective_rpc`). Several are
//! open only in an engine's development mode (`VLLM_SERVER_DEV_MODE=1`), which sleep needs:
//! the door drives them itself, on the engine's own port, and a client behind the door
//! reaches none of them.

use hyper::Method;

/// Routes that control an engine whatever the method (vLLM 0.32's `entrypoints` and
/// dev-mode routers; SGLang's memory and weight routes).
const CONTROL: &[&str] = &[
    // vLLM: sleep mode, caches, weights, profiling, pausing, RPC.
    "/sleep",
    "/wake_up",
    "/is_sleeping",
    "/release_kv_cache_memory",
    "/collective_rpc",
    "/reset_prefix_cache",
    "/reset_mm_cache",
    "/reset_encoder_cache",
    "/server_info",
    "/pause",
    "/resume",
    "/is_paused",
    "/start_profile",
    "/stop_profile",
    "/update_weights",
    "/start_weight_update",
    "/finish_weight_update",
    "/init_weight_transfer_engine",
    "/shutdown_weight_transfer_engine",
    "/start_draft_weight_update",
    "/update_weight_version",
    "/weight_checker",
    "/weight_info",
    "/abort_requests",
    "/inference/v1/abort_requests",
    "/scale_elastic_ep",
    "/is_scaling_elastic_ep",
    "/v1/load_lora_adapter",
    "/v1/unload_lora_adapter",
    "/fault_tolerance/status",
    "/get_world_size",
    "/kv_event_sources",
    // SGLang: memory occupation, weights, adapters, internal state.
    "/release_memory_occupation",
    "/resume_memory_occupation",
    "/flush_cache",
    "/update_weights_from_disk",
    "/update_weights_from_tensor",
    "/update_weights_from_distributed",
    "/init_weights_update_group",
    "/load_lora_adapter",
    "/unload_lora_adapter",
    "/set_internal_state",
    "/configure_logging",
    "/abort_request",
    // llama-server's router: loading and unloading its models.
    "/models/load",
    "/models/unload",
];

/// llama-server's routes that change the server when written to (reading them is an API).
const WRITTEN: &[&str] = &["/props", "/lora-adapters", "/slots"];

/// The engine control route `path` is (as the engine names it), when it is one.
pub(crate) fn control(method: &Method, path: &str) -> Option<&'static str> {
    let path = path.trim_end_matches('/');
    let under = |route: &str| path == route || path.starts_with(&format!("{route}/"));
    if let Some(route) = CONTROL.iter().find(|r| under(r)) {
        return Some(route);
    }
    let reads = matches!(*method, Method::GET | Method::HEAD);
    (WRITTEN.iter()).find(|r| !reads && under(r)).copied()
}

/// What a client asking `route` is told.
pub(crate) fn refusal(route: &str) -> String {
    format!(
        "{route} controls the engine and is the front door's own: clients behind the door do \
         not reach it (serve.sleep in the recipe lets the door sleep a model)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_routes_are_known_and_the_apis_are_not() {
        for (method, path) in [
            (Method::POST, "/sleep"),
            (Method::POST, "/wake_up/"),
            (Method::GET, "/is_sleeping"),
            (Method::POST, "/collective_rpc"),
            (Method::POST, "/v1/load_lora_adapter"),
            (Method::POST, "/release_memory_occupation"),
            (Method::POST, "/slots/0"),
            (Method::POST, "/props"),
            (Method::POST, "/models/unload"),
        ] {
            assert!(control(&method, path).is_some(), "{method} {path}");
        }
        for (method, path) in [
            (Method::POST, "/v1/chat/completions"),
            (Method::POST, "/v1/messages"),
            (Method::POST, "/v1/responses"),
            (Method::GET, "/v1/models"),
            (Method::GET, "/props"),
            (Method::GET, "/slots"),
            (Method::POST, "/sleepy"),
            (Method::POST, "/tokenize"),
        ] {
            assert_eq!(control(&method, path), None, "{method} {path}");
        }
    }
}
