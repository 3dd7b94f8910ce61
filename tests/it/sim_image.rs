//! The simulated engine is one static binary: it runs from a FROM-scratch image on the
//! real Docker Engine and answers a real streaming client through a published port.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use bollard::models::{ContainerCreateBody, HostConfig, PortBinding};
use bollard::query_parameters::{CreateContainerOptionsBuilder, RemoveContainerOptionsBuilder};
use serde_json::json;

use crate::support::{self, content_of, docker, http_status, stream_chat};

const LABEL: &str = "io.sparkctl.test";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sim_runs_from_a_scratch_image_and_streams() {
    let docker = docker().await;
    let tag = "sparkctl-sim:test";
    support::build_sim_image(&docker, tag).await;

    let image = docker.inspect_image(tag).await.unwrap();
    assert_eq!(
        image.config.as_ref().unwrap().entrypoint.as_deref(),
        Some(&["/sparkctl".to_string()][..])
    );
    assert_eq!(
        image.root_fs.unwrap().layers.unwrap().len(),
        1,
        "nothing but the binary"
    );

    let name = format!("sparkctl-test-sim-{}", std::process::id());
    let body = ContainerCreateBody {
        image: Some(tag.into()),
        cmd: Some(
            [
                "sim",
                "--host",
                "0.0.0.0",
                "--port",
                "8000",
                "--load-time",
                // Long enough that a busy dockerd or a descheduled test still sees it load.
                "3s",
                "--ttft",
                "20ms",
                "--tokens",
                "6",
            ]
            .map(String::from)
            .to_vec(),
        ),
        labels: Some(HashMap::from([(
            LABEL.to_string(),
            "sim-image".to_string(),
        )])),
        exposed_ports: Some(vec!["8000/tcp".to_string()]),
        host_config: Some(HostConfig {
            port_bindings: Some(HashMap::from([(
                "8000/tcp".to_string(),
                Some(vec![PortBinding {
                    host_ip: Some("127.0.0.1".into()),
                    host_port: Some(String::new()),
                }]),
            )])),
            ..Default::default()
        }),
        ..Default::default()
    };
    docker
        .create_container(
            Some(CreateContainerOptionsBuilder::new().name(&name).build()),
            body,
        )
        .await
        .unwrap();
    let _cleanup = Cleanup {
        docker: docker.clone(),
        name: name.clone(),
    };
    docker.start_container(&name, None).await.unwrap();

    let info = docker.inspect_container(&name, None).await.unwrap();
    let port = info.network_settings.unwrap().ports.unwrap()["8000/tcp"]
        .as_ref()
        .unwrap()[0]
        .host_port
        .clone()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}");

    let deadline = Instant::now() + Duration::from_secs(30);
    let mut saw_loading = false;
    loop {
        match http_status(&url, "/health") {
            Some(200) => break,
            Some(503) => saw_loading = true,
            _ => {}
        }
        assert!(
            Instant::now() < deadline,
            "container sim never became ready"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(saw_loading, "health answered 503 while the model loaded");

    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let body = json!({"messages": [{"role": "user", "content": "What is the capital of Japan?"}], "stream": true});
    let (status, events) = stream_chat(&client, &url, &body).await;
    assert_eq!(status, 200);
    let text: String = events
        .iter()
        .filter_map(|e| e.json())
        .filter_map(|v| content_of(&v).map(str::to_string))
        .collect();
    assert_eq!(text, "Tokyo is the capital of Japan.");

    // The container's own output is kept by the engine (logs outlive the process).
    let logs = container_logs(&docker, &name).await;
    assert!(logs.contains("listening on http://0.0.0.0:8000"), "{logs}");
    assert!(logs.contains("POST /v1/chat/completions 200"), "{logs}");
}

async fn container_logs(docker: &bollard::Docker, name: &str) -> String {
    use futures_util::StreamExt;
    let opts = bollard::query_parameters::LogsOptionsBuilder::new()
        .stdout(true)
        .stderr(true)
        .build();
    let mut out = String::new();
    let mut logs = docker.logs(name, Some(opts));
    while let Some(chunk) = logs.next().await {
        out.push_str(&chunk.unwrap().to_string());
    }
    out
}

struct Cleanup {
    docker: bollard::Docker,
    name: String,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let (docker, name) = (self.docker.clone(), self.name.clone());
        // Drop cannot await: the helper runs the removal on a runtime of its own.
        support::block_on(async move {
            let opts = RemoveContainerOptionsBuilder::new().force(true).build();
            let _ = docker.remove_container(&name, Some(opts)).await;
        });
    }
}
