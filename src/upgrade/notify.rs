//! Telling the owner how an upgrade ended: the recipe's `notify` webhook (a POST of one
//! JSON document) and/or command (argv, the same JSON on its stdin), for the outcomes it
//! names. `${NAME}` takes an environment variable's value at send time only: what is said
//! and recorded names the webhook and command as the recipe writes them, never a value. A
//! notification that fails or times out is said and recorded; the outcome stands.

use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;

use crate::history::RunRecord;
use crate::recipe::notify::{references, Notify};

/// `text` with each `${NAME}` replaced by its value, and the values (to keep them out of
/// any message); or which variable is not set.
fn resolve(text: &str) -> Result<(String, Vec<String>), String> {
    let mut out = text.to_string();
    let mut values = Vec::new();
    for name in references(text)? {
        let value = crate::settings::host_var(name)
            .ok_or_else(|| format!("${{{name}}} is not set in the environment"))?;
        out = out.replace(&format!("${{{name}}}"), &value);
        values.push(value);
    }
    Ok((out, values))
}

/// `text` with every secret value in it replaced by a mark.
fn scrub(text: String, secrets: &[String]) -> String {
    secrets
        .iter()
        .filter(|s| !s.is_empty())
        .fold(text, |t, s| t.replace(s.as_str(), "[secret]"))
}

/// The document both receive: the outcome in history's words, the digests, the gates'
/// figures, the evaluation's scores, the first bad digest, the run.
pub(super) fn payload(record: &RunRecord) -> Value {
    let note = record.upgrade.clone().unwrap_or_default();
    let score = |sets: &[crate::eval::SetScore]| {
        let (right, items) = sets
            .iter()
            .fold((0, 0), |(r, n), s| (r + s.right(), n + s.items()));
        (items > 0).then(|| {
            json!({"right": right, "items": items, "accuracy_pct": right as f64 / items as f64 * 100.0, "sets": sets})
        })
    };
    json!({
        "event": "upgrade",
        "outcome": record.outcome.to_string(),
        "recipe": record.recipe,
        "run_id": record.run_id,
        "reference": note.reference,
        "digest": {"old": note.old, "new": note.new},
        "pinned": note.pinned,
        "skipped": note.skipped,
        "gates": record.gates,
        "evaluation": record.eval.as_ref().map(|e| json!({
            "candidate": score(e.candidate()),
            "production": score(e.production()),
            "lost": e.lost(),
        })),
        "first_bad": note.bisect.as_ref().and_then(|b| b.first_bad.clone()),
        "bisect": note.bisect,
        "error": record.error,
        "serving": record.serving,
        "host": crate::host::hostname(),
        "time": crate::units::now_utc(),
    })
}

/// Tells every notifier of `n` (when it tells this outcome); one line per notifier, for
/// the record and for people.
pub(super) async fn tell(n: &Notify, record: &RunRecord) -> Vec<String> {
    if !n.tells(&record.outcome.to_string()) {
        return Vec::new();
    }
    let doc = payload(record);
    let mut said = Vec::new();
    if let Some(url) = &n.webhook {
        let how = match webhook(url, n, &doc).await {
            Ok(how) => how,
            Err(e) => format!("NOT sent: {e}"),
        };
        said.push(format!("webhook {url}: {how}"));
    }
    if let Some(argv) = &n.command {
        let how = match command(argv, n.timeout(), &doc).await {
            Ok(how) => how,
            Err(e) => format!("NOT told: {e}"),
        };
        said.push(format!("command {}: {how}", argv[0]));
    }
    said
}

async fn webhook(url: &str, n: &Notify, doc: &Value) -> Result<String, String> {
    let (target, mut secrets) = resolve(url)?;
    // Never redirected: a redirect would carry the URL's token and the headers to a host
    // the recipe does not name.
    let client = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(n.timeout())
        .build()
        .map_err(|e| format!("HTTP client: {e}"))?;
    let mut req = client.post(&target).timeout(n.timeout()).json(doc);
    for (name, value) in &n.headers {
        let (v, mut s) = resolve(value)?;
        secrets.append(&mut s);
        req = req.header(name.as_str(), v);
    }
    match req.send().await {
        Ok(resp) if resp.status().is_success() => Ok(format!("sent (HTTP {})", resp.status())),
        Ok(resp) if resp.status().is_redirection() => Err(format!(
            "it answered HTTP {}, a redirect, which is not followed (give the webhook's own URL)",
            resp.status()
        )),
        Ok(resp) => Err(format!("it answered HTTP {}", resp.status())),
        Err(e) if e.is_timeout() => Err(format!(
            "no answer within {}",
            crate::units::format_duration(n.timeout())
        )),
        Err(e) => Err(scrub(crate::error::chain(&e.without_url()), &secrets)),
    }
}

async fn command(argv: &[String], within: Duration, doc: &Value) -> Result<String, String> {
    let mut words = Vec::new();
    let mut secrets = Vec::new();
    for w in argv {
        let (word, mut s) = resolve(w)?;
        words.push(word);
        secrets.append(&mut s);
    }
    let mut child = tokio::process::Command::new(&words[0])
        .args(&words[1..])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| scrub(format!("cannot run it: {e}"), &secrets))?;
    let body = serde_json::to_vec(doc).expect("the document serializes");
    let stdin = child.stdin.take();
    // The write is inside the timeout: a program that never reads its stdin would hold a
    // document larger than the pipe's buffer, and the upgrade with it, for ever.
    let told = async {
        if let Some(mut stdin) = stdin {
            // A program that does not read its stdin may close it: not a failure of ours.
            let _ = stdin.write_all(&body).await;
            // Closed here: the end of the document for a program that reads to its end.
        }
        child.wait().await
    };
    match tokio::time::timeout(within, told).await {
        Ok(Ok(status)) if status.success() => Ok("told (exit 0)".into()),
        Ok(Ok(status)) => Err(format!("it ended with {status}")),
        Ok(Err(e)) => Err(format!("waiting for it: {e}")),
        Err(_) => {
            let _ = child.kill().await;
            Err(format!(
                "still running after {}; stopped",
                crate::units::format_duration(within)
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::TcpListener;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use super::*;

    /// A loopback listener that counts its connections and answers each with `answer`.
    fn listener(answer: String) -> (String, Arc<AtomicUsize>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", l.local_addr().unwrap());
        let seen = Arc::new(AtomicUsize::new(0));
        let count = seen.clone();
        std::thread::spawn(move || {
            for mut conn in l.incoming().flatten() {
                count.fetch_add(1, Ordering::SeqCst);
                let mut head = [0u8; 4096];
                let _ = conn.read(&mut head);
                let _ = conn.write_all(answer.as_bytes());
            }
        });
        (url, seen)
    }

    #[tokio::test]
    async fn a_redirect_is_the_webhook_s_answer_and_is_never_followed() {
        // SAFETY: a variable of this test's own name, set before anything reads it.
        unsafe { std::env::set_var("NOTIFY_TEST_REDIRECT_TOKEN", "t0k3n") };
        let (elsewhere, reached) = listener("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n".into());
        let (hook, _) = listener(format!(
            "HTTP/1.1 302 Found\r\nLocation: {elsewhere}/stolen\r\nContent-Length: 0\r\n\r\n"
        ));
        let n = Notify {
            webhook: Some(format!("{hook}/hook?key=${{NOTIFY_TEST_REDIRECT_TOKEN}}")),
            headers: [(
                "Authorization".to_string(),
                "Bearer ${NOTIFY_TEST_REDIRECT_TOKEN}".to_string(),
            )]
            .into(),
            ..Notify::default()
        };
        let said = webhook(
            n.webhook.as_deref().unwrap(),
            &n,
            &json!({"event": "upgrade"}),
        )
        .await;
        let e = said.unwrap_err();
        assert!(e.contains("302"), "{e}");
        assert!(!e.contains("t0k3n"), "{e}");
        // The redirect's target never saw the token in the URL nor the header.
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(
            reached.load(Ordering::SeqCst),
            0,
            "the redirect was followed"
        );
    }

    #[tokio::test]
    async fn a_command_that_never_reads_its_stdin_is_stopped_at_the_timeout() {
        // Far more than a pipe holds: the write blocks until the command reads or ends.
        let doc = json!({"event": "upgrade", "padding": "x".repeat(4 << 20)});
        let argv = ["sleep".to_string(), "600".to_string()];
        let told = tokio::time::timeout(
            Duration::from_secs(30),
            command(&argv, Duration::from_secs(1), &doc),
        )
        .await
        .expect("the notify command was not bounded by its timeout");
        let e = told.unwrap_err();
        assert!(e.starts_with("still running after 1s"), "{e}");
    }

    #[test]
    fn references_resolve_at_send_time_and_stay_out_of_messages() {
        // SAFETY: a variable of this test's own name, set before anything reads it.
        unsafe { std::env::set_var("NOTIFY_TEST_TOKEN_OF_SPARKCTL", "s3cr3t") };
        let (url, secrets) = resolve("http://h/x?t=${NOTIFY_TEST_TOKEN_OF_SPARKCTL}").unwrap();
        assert_eq!(url, "http://h/x?t=s3cr3t");
        assert_eq!(
            scrub(format!("failed for {url}"), &secrets),
            "failed for http://h/x?t=[secret]"
        );
        let e = resolve("${NOTIFY_TEST_UNSET_OF_SPARKCTL}").unwrap_err();
        assert_eq!(
            e,
            "${NOTIFY_TEST_UNSET_OF_SPARKCTL} is not set in the environment"
        );
    }
}
