//! A real local registry for the tests: Debian's `docker-registry` on a free loopback port,
//! images pushed to it through the Engine API.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures_util::StreamExt;

/// A registry on a free loopback port with its storage in a temp dir; stopped on drop.
pub struct Registry {
    child: Child,
    pub addr: String,
    dir: PathBuf,
}

impl Registry {
    pub fn start(tag: &str) -> Registry {
        let dir =
            std::env::temp_dir().join(format!("sparkctl-registry-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let addr = format!("127.0.0.1:{}", super::free_port());
        let config = dir.join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: {addr}\n",
                dir.join("data").display()
            ),
        )
        .unwrap();
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("docker-registry runs (Debian's docker-registry; `bash .ci/test` installs it)");
        let deadline = Instant::now() + Duration::from_secs(30);
        while super::http_status(&format!("http://{addr}"), "/v2/") != Some(200) {
            assert!(
                Instant::now() < deadline,
                "registry on {addr} did not answer"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Registry { child, addr, dir }
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A registry and a deck whose recipes dir holds the suite `tiny` (`suite`): where a test
/// pushes nightly images to `repo` (returned) and follows them.
pub fn with_deck(tag: &str, suite: &str) -> (Registry, super::Deck, String) {
    let registry = Registry::start(tag);
    let deck = super::Deck::new(tag);
    std::fs::create_dir_all(deck.dir.join("recipes/suites")).unwrap();
    std::fs::write(deck.dir.join("recipes/suites/tiny.yaml"), suite).unwrap();
    let repo = format!("{}/spark/sim", registry.addr);
    (registry, deck, repo)
}

/// Removes these images (force: containers may still name them), whatever a test left.
pub fn remove_images(refs: Vec<String>) {
    super::block_on(async move {
        let Ok(docker) = bollard::Docker::connect_with_local_defaults() else {
            return;
        };
        let opts = bollard::query_parameters::RemoveImageOptionsBuilder::new()
            .force(true)
            .build();
        for r in refs {
            let _ = docker.remove_image(&r, Some(opts.clone()), None).await;
        }
    });
}

/// Tags `image` as `repo:tag` and pushes it; returns the digest the registry stored.
pub async fn push(docker: &bollard::Docker, image: &str, repo: &str, tag: &str) -> String {
    use bollard::query_parameters::{PushImageOptionsBuilder, TagImageOptionsBuilder};
    docker
        .tag_image(
            image,
            Some(TagImageOptionsBuilder::new().repo(repo).tag(tag).build()),
        )
        .await
        .unwrap();
    let mut stream = docker.push_image(
        repo,
        Some(PushImageOptionsBuilder::new().tag(tag).build()),
        None,
    );
    while let Some(item) = stream.next().await {
        let info = item.unwrap_or_else(|e| panic!("push {repo}:{tag}: {e}"));
        if let Some(err) = info.error_detail.and_then(|d| d.message) {
            panic!("push {repo}:{tag}: {err}");
        }
    }
    let inspected = docker
        .inspect_image(&format!("{repo}:{tag}"))
        .await
        .unwrap();
    inspected
        .repo_digests
        .unwrap()
        .iter()
        .find_map(|rd| rd.strip_prefix(&format!("{repo}@")).map(str::to_string))
        .expect("pushed image has a digest for the repo")
}
