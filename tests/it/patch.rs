//! `sparkctl patch` on fixture model dirs shaped like the seeds' exports (transformers 5.x
//! text-only config, TokenizersBackend, hf_quant_config NVFP4 / MIXED_PRECISION), with
//! real files, a real tmpfs for the disk-full case and a real helper container for chown.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::support::{self, Deck, Ran};

/// What transformers 5.3 wrote for the NVFP4 9B (seed 001 Problem 1, seed 004 errors 5-6).
fn text_only_config() -> Value {
    json!({
        "architectures": ["Qwen3_5ForCausalLM"],
        "hidden_size": 4096,
        "model_type": "qwen3_5_text",
        "num_hidden_layers": 32,
        "quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4"},
        "torch_dtype": "bfloat16",
        "transformers_version": "5.3.0"
    })
}

/// A model dir and a donor dir as the seeds had them; returns (model, donor).
fn fixture(deck: &Deck, quant_algo: &str) -> (PathBuf, PathBuf) {
    let model = deck.dir.join("model");
    let donor = deck.dir.join("donor");
    std::fs::create_dir_all(&model).unwrap();
    std::fs::create_dir_all(&donor).unwrap();
    let pretty = |v: &Value| serde_json::to_string_pretty(v).unwrap() + "\n";
    std::fs::write(model.join("config.json"), pretty(&text_only_config())).unwrap();
    std::fs::write(
        model.join("tokenizer_config.json"),
        pretty(&json!({"tokenizer_class": "TokenizersBackend", "model_max_length": 262144})),
    )
    .unwrap();
    std::fs::write(
        model.join("hf_quant_config.json"),
        pretty(&json!({"producer": {"name": "modelopt", "version": "0.37.0"}, "quantization": {"quant_algo": quant_algo, "group_size": 16}})),
    )
    .unwrap();
    sparkctl::testkit::write_fixture(
        &model.join("model.safetensors"),
        &[
            ("model.embed_tokens.weight", 4096),
            ("lm_head.weight", 2048),
        ],
    )
    .unwrap();
    std::fs::write(
        donor.join("tokenizer.json"),
        b"{\"model\": {\"type\": \"BPE\"}}\n",
    )
    .unwrap();
    std::fs::write(
        donor.join("tokenizer_config.json"),
        pretty(&json!({"tokenizer_class": "Qwen2Tokenizer"})),
    )
    .unwrap();
    // write-file takes its source from patches/ beside recipes/.
    let shipped = deck.dir.join("patches/qwen3_5");
    std::fs::create_dir_all(&shipped).unwrap();
    std::fs::copy(
        support::repo().join("patches/qwen3_5/preprocessor_config.json"),
        shipped.join("preprocessor_config.json"),
    )
    .unwrap();
    (model, donor)
}

/// Seed 004's checklist as steps: wrap, tokenizer class rename, copy tokenizer.json from
/// the donor, write preprocessor_config.json, expect NVFP4, expect files and safetensors.
fn checklist_recipe(deck: &Deck, name: &str, model: &Path, donor: &Path, extra_steps: &str) {
    deck.recipe(
        name,
        &format!(
            "engine: vllm\nimage: {}\nmodel:\n  path: {}\n  patches:\n{extra_steps}    - wrap-vl-config: {{}}\n    - json-edit:\n        file: tokenizer_config.json\n        ops:\n          - rename: {{pointer: /tokenizer_class, from: TokenizersBackend, to: Qwen2Tokenizer}}\n    - copy-from: {{donor: {}, files: [tokenizer.json]}}\n    - write-file: {{path: preprocessor_config.json, from: patches/qwen3_5/preprocessor_config.json, if-missing: true}}\n    - expect: {{file: hf_quant_config.json, pointer: /quantization/quant_algo, equals: NVFP4}}\n    - expect-files: {{files: [tokenizer.json, tokenizer_config.json, preprocessor_config.json]}}\n    - expect-safetensors: {{}}\nserver:\n  port: 8000\n",
            support::busybox_image_name(),
            model.display(),
            donor.display()
        ),
    );
}

/// Every file under `dir` with its bytes.
fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() {
            out.insert(
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&p).unwrap(),
            );
        }
    }
    out
}

fn json_file(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

#[test]
fn patch_produces_the_checklist_result_is_idempotent_and_reverts_byte_for_byte() {
    let deck = Deck::new("patch-checklist");
    let (model, donor) = fixture(&deck, "NVFP4");
    checklist_recipe(&deck, "qat", &model, &donor, "");
    let original = snapshot(&model);

    // Dry run: the diff and the plan, and not one byte changed.
    let dry = deck.ok(&["patch", "qat", "--dry-run"]);
    assert!(
        dry.contains("-  \"model_type\": \"qwen3_5_text\","),
        "{dry}"
    );
    assert!(dry.contains("+  \"model_type\": \"qwen3_5\","), "{dry}");
    assert!(
        dry.contains("-  \"tokenizer_class\": \"TokenizersBackend\","),
        "{dry}"
    );
    assert!(
        dry.contains("+  \"tokenizer_class\": \"Qwen2Tokenizer\","),
        "{dry}"
    );
    assert!(dry.contains(&format!(
        "copy {}/tokenizer.json -> tokenizer.json (new file)",
        donor.display()
    )));
    assert!(dry.contains("+++ b/preprocessor_config.json"), "{dry}");
    assert!(dry.contains(
        "ok   step 5: hf_quant_config.json /quantization/quant_algo == \"NVFP4\": holds"
    ));
    assert!(dry.contains("nothing was changed (--dry-run)"));
    assert_eq!(snapshot(&model), original, "dry run changed nothing");

    let out = deck.ok(&["patch", "qat"]);
    assert!(
        out.contains("patched 4 file(s), kept 2 original(s)"),
        "{out}"
    );
    assert!(out.contains("model fingerprint sha256:"), "{out}");

    // What seed 004's checklist produces by hand.
    let config = json_file(&model.join("config.json"));
    assert_eq!(config["model_type"], "qwen3_5");
    assert_eq!(
        config["architectures"],
        json!(["Qwen3_5ForConditionalGeneration"])
    );
    assert_eq!(config["text_config"], text_only_config());
    assert_eq!(config["quantization_config"]["quant_algo"], "NVFP4");
    assert_eq!(
        json_file(&model.join("tokenizer_config.json"))["tokenizer_class"],
        "Qwen2Tokenizer"
    );
    assert_eq!(
        json_file(&model.join("tokenizer_config.json"))["model_max_length"],
        262144
    );
    assert_eq!(
        std::fs::read(model.join("tokenizer.json")).unwrap(),
        std::fs::read(donor.join("tokenizer.json")).unwrap()
    );
    assert_eq!(
        std::fs::read(model.join("preprocessor_config.json")).unwrap(),
        std::fs::read(support::repo().join("patches/qwen3_5/preprocessor_config.json")).unwrap()
    );
    assert_eq!(
        std::fs::read(model.join("config.json.orig")).unwrap(),
        original["config.json"]
    );
    assert_eq!(
        std::fs::read(model.join("tokenizer_config.json.orig")).unwrap(),
        original["tokenizer_config.json"]
    );
    assert!(
        !model.join("hf_quant_config.json.orig").exists(),
        "untouched files get no backup"
    );

    // A second run changes nothing and says so; the backups are not overwritten.
    let patched = snapshot(&model);
    let again = deck.ok(&["patch", "qat"]);
    assert!(again.contains("nothing to change"), "{again}");
    assert_eq!(snapshot(&model), patched);

    let reverted = deck.ok(&["patch", "qat", "--revert"]);
    assert!(reverted.contains("restored config.json"), "{reverted}");
    assert!(reverted.contains("removed  tokenizer.json"), "{reverted}");
    assert_eq!(
        snapshot(&model),
        original,
        "byte for byte, no file left over"
    );
    let nothing = deck.ok(&["patch", "qat", "--revert"]);
    assert!(nothing.contains("nothing to revert"), "{nothing}");
    // And it patches again after a revert.
    deck.ok(&["patch", "qat"]);
    assert_eq!(snapshot(&model), patched);
}

#[test]
fn a_running_server_s_model_dir_is_not_patched_under_it() {
    let deck = Deck::new("patch-running");
    let (model, _) = fixture(&deck, "NVFP4");
    let port = support::free_port();
    deck.recipe(
        "live",
        &format!(
            "engine: sim\nruntime: process\nmodel:\n  path: {}\n  patches:\n    - wrap-vl-config: {{}}\nserver:\n  port: {port}\n  args: [--load-time, 0s]\n",
            model.display()
        ),
    );
    deck.ok(&["start", "live"]);
    let dry = deck.ok(&["patch", "live", "--dry-run"]);
    assert!(dry.contains("wrap the text-only config"), "{dry}");
    refused(
        &deck,
        "live",
        &model,
        2,
        &[
            "live is already running (process",
            "`sparkctl down live` before you patch it",
        ],
    );
    deck.ok(&["down", "live"]);
    deck.ok(&["patch", "live"]);
}

#[test]
fn mixed_precision_fails_its_expectation_and_nothing_changes() {
    let deck = Deck::new("patch-mixed");
    let (model, donor) = fixture(&deck, "MIXED_PRECISION");
    checklist_recipe(&deck, "mixed", &model, &donor, "");
    let original = snapshot(&model);
    deck.sparkctl(&["patch", "mixed"])
        .exits(1)
        .warns("1 expectation(s) do not hold for mixed; nothing was changed")
        .warns("step 5: hf_quant_config.json /quantization/quant_algo == \"NVFP4\": is \"MIXED_PRECISION\", expected \"NVFP4\"");
    assert_eq!(snapshot(&model), original);
}

/// Runs `patch NAME`, expects `code`, checks the message and that the model is untouched.
fn refused(deck: &Deck, name: &str, model: &Path, code: i32, needles: &[&str]) -> String {
    let before = snapshot(model);
    let ran = needles
        .iter()
        .fold(deck.sparkctl(&["patch", name]).exits(code), |ran, n| {
            ran.warns(n)
        });
    assert_eq!(snapshot(model), before, "{name}: the model dir changed");
    ran.stderr()
}

#[test]
fn bad_inputs_are_refused_by_name_and_change_nothing() {
    let deck = Deck::new("patch-bad");
    let (model, donor) = fixture(&deck, "NVFP4");

    checklist_recipe(&deck, "nomodel", &deck.dir.join("absent"), &donor, "");
    deck.sparkctl(&["patch", "nomodel"])
        .exits(2)
        .warns("nomodel.yaml:5:3: model.path:")
        .warns("is not a directory");

    checklist_recipe(&deck, "nodonor", &model, &deck.dir.join("no-donor"), "");
    refused(
        &deck,
        "nodonor",
        &model,
        2,
        &[
            "model.patches[2].copy-from.donor:",
            "no-donor does not exist",
        ],
    );

    deck.recipe(
        "lacks",
        &format!(
            "engine: vllm\nimage: x\nmodel:\n  path: {}\n  patches:\n    - wrap-vl-config: {{}}\n    - copy-from: {{donor: {}, files: [tokenizer.json, preprocessor_config.json]}}\nserver:\n  port: 8000\n",
            model.display(),
            donor.display()
        ),
    );
    refused(
        &deck,
        "lacks",
        &model,
        2,
        &[
            "model.patches[1].copy-from.files:",
            "lacks preprocessor_config.json",
        ],
    );

    // Malformed JSON in the model dir.
    let broken = deck.dir.join("broken");
    std::fs::create_dir_all(&broken).unwrap();
    std::fs::write(
        broken.join("config.json"),
        "{\"model_type\": \"qwen3_5_text\",\n",
    )
    .unwrap();
    checklist_recipe(&deck, "malformed", &broken, &donor, "");
    refused(
        &deck,
        "malformed",
        &broken,
        2,
        &[
            "model.patches[0].wrap-vl-config:",
            "config.json in the model dir is not valid JSON",
        ],
    );

    // A file that is a symlink pointing out of the model dir.
    let outside = deck.dir.join("outside.json");
    std::fs::write(&outside, "{\"tokenizer_class\": \"TokenizersBackend\"}\n").unwrap();
    let linked = deck.dir.join("linked");
    std::fs::create_dir_all(&linked).unwrap();
    std::fs::write(
        linked.join("config.json"),
        serde_json::to_string(&text_only_config()).unwrap(),
    )
    .unwrap();
    std::os::unix::fs::symlink(&outside, linked.join("tokenizer_config.json")).unwrap();
    checklist_recipe(&deck, "symlink", &linked, &donor, "");
    refused(
        &deck,
        "symlink",
        &linked,
        2,
        &[
            "model.patches[1].json-edit:",
            "outside the model dir (a symlink?)",
        ],
    );
    assert!(std::fs::read_to_string(&outside)
        .unwrap()
        .contains("TokenizersBackend"));

    // A read-only file is not replaced behind its mode's back.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        model.join("tokenizer_config.json"),
        std::fs::Permissions::from_mode(0o444),
    )
    .unwrap();
    checklist_recipe(&deck, "readonly", &model, &donor, "");
    refused(
        &deck,
        "readonly",
        &model,
        1,
        &[
            "tokenizer_config.json is read-only (mode 444)",
            "nothing was changed",
        ],
    );
    assert!(!model.join(".sparkctl-patch.json").exists());
}

/// A tiny tmpfs for the disk-full case (root, as on CI; elsewhere the test says why it stops).
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path, size: &str) -> Option<Tmpfs> {
        std::fs::create_dir_all(at).unwrap();
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(at)
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| Tmpfs(at.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn a_full_disk_leaves_no_half_written_file_and_the_originals_intact() {
    let deck = Deck::new("patch-full");
    let (_, donor) = fixture(&deck, "NVFP4");
    let Some(tmpfs) = Tmpfs::mount(&deck.dir.join("small"), "256k") else {
        assert!(
            std::env::var("CI").is_err(),
            "CI runs as root and must mount a tmpfs"
        );
        eprintln!("skipped: cannot mount a tmpfs here (not root)");
        return;
    };
    let model = tmpfs.0.join("model");
    std::fs::create_dir_all(&model).unwrap();
    let pretty = serde_json::to_string_pretty(&text_only_config()).unwrap() + "\n";
    std::fs::write(model.join("config.json"), &pretty).unwrap();
    // The donor's file is bigger than the space left.
    std::fs::write(donor.join("big.bin"), vec![1u8; 512 * 1024]).unwrap();
    deck.recipe(
        "full",
        &format!(
            r#"engine: vllm
image: x
model:
  path: {}
  patches:
    - wrap-vl-config: {{}}
    - copy-from: {{donor: {}, files: [big.bin]}}
server:
  port: 8000
"#,
            model.display(),
            donor.display()
        ),
    );
    deck.sparkctl(&["patch", "full"])
        .exits(1)
        .warns("No space left on device")
        .warns("big.bin is unchanged")
        .warns("`sparkctl patch full --revert` restores them");
    let names: Vec<String> = snapshot(&model).into_keys().collect();
    assert!(
        !names.iter().any(|n| n.contains("sparkctl-tmp")),
        "no temp file left: {names:?}"
    );
    assert!(!model.join("big.bin").exists(), "no half-written big.bin");
    // The earlier step was applied whole, and reverts to the original bytes.
    assert_eq!(
        json_file(&model.join("config.json"))["model_type"],
        "qwen3_5"
    );
    assert_eq!(
        std::fs::read_to_string(model.join("config.json.orig")).unwrap(),
        pretty
    );
    deck.ok(&["patch", "full", "--revert"]);
    assert_eq!(
        std::fs::read_to_string(model.join("config.json")).unwrap(),
        pretty
    );
    assert_eq!(snapshot(&model).len(), 1, "{:?}", snapshot(&model).keys());
}

#[test]
fn root_owned_files_go_back_to_the_user_through_a_helper_container() {
    // SAFETY: a getter.
    if unsafe { libc::geteuid() } != 0 {
        assert!(std::env::var("CI").is_err(), "CI runs as root");
        eprintln!("skipped: needs root to make root-owned files and to drop to a user");
        return;
    }
    let image = support::busybox_image();
    let deck = Deck::new("patch-chown");
    let (model, donor) = fixture(&deck, "NVFP4");
    let user = 4321u32;
    // The export left root-owned files in a dir the user owns (seed 004 error 2).
    std::os::unix::fs::chown(&model, Some(user), Some(user)).unwrap();
    std::os::unix::fs::chown(deck.dir.join("state"), Some(user), Some(user)).unwrap();
    assert_eq!(
        std::fs::metadata(model.join("config.json")).unwrap().uid(),
        0
    );
    checklist_recipe(
        &deck,
        "owned",
        &model,
        &donor,
        "    - chown: {to: invoking-user}\n",
    );
    let docker_gid = std::fs::metadata("/var/run/docker.sock").unwrap().gid();

    // sparkctl as an ordinary user of the docker group: no sudo.
    let mut cmd = std::process::Command::new("setpriv");
    cmd.args([
        format!("--reuid={user}"),
        format!("--regid={user}"),
        format!("--groups={docker_gid}"),
        "--".into(),
    ]);
    let inner = deck.cmd(&["patch", "owned"]);
    cmd.arg(inner.get_program())
        .args(inner.get_args())
        .envs(inner.get_envs().filter_map(|(k, v)| v.map(|v| (k, v))))
        .env("HOME", &deck.dir)
        .current_dir(support::repo());
    Ran::of(&mut cmd).succeeds().says(&format!(
        "owners change through a helper container of {image}"
    ));
    for entry in std::fs::read_dir(&model).unwrap() {
        let meta = entry.unwrap().metadata().unwrap();
        assert_eq!(
            (meta.uid(), meta.gid()),
            (user, user),
            "every file is the user's now"
        );
    }
    assert_eq!(
        json_file(&model.join("config.json"))["model_type"],
        "qwen3_5"
    );
    // The helper did its job and is gone; nothing else was touched.
    let left = support::block_on(async {
        let docker = support::docker().await;
        let filters =
            std::collections::HashMap::from([("label", vec!["io.sparkctl.helper=chown"])]);
        let opts = bollard::query_parameters::ListContainersOptionsBuilder::new()
            .all(true)
            .filters(&filters)
            .build();
        docker.list_containers(Some(opts)).await.unwrap()
    });
    assert!(
        left.iter()
            .all(|c| c.labels.as_ref().unwrap()["io.sparkctl.state"]
                != deck.state().display().to_string()),
        "helper container removed"
    );
}
