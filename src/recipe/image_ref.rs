//! Is `image:` a container image reference? The grammar is Docker's distribution/reference,
//! as the `oci-spec` crate implements it (the containers organisation's crate, also behind
//! oci-client; only its `distribution` feature is built). This file only decides which part
//! of the text to point at and how to say what is wrong; what is valid is the crate's call.

use oci_spec::distribution::{ParseError, Reference};

/// What is wrong with a reference: where in the text (a byte offset), what, and the fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Problem {
    pub(in crate::recipe) offset: usize,
    pub(crate) message: String,
    pub(crate) help: String,
}

fn parses(text: &str) -> Result<(), ParseError> {
    Reference::try_from(text).map(|_| ())
}

/// None when `image` is a valid reference.
pub(crate) fn problem(image: &str) -> Option<Problem> {
    let err = parses(image).err()?;
    // Split as the grammar does: NAME[:TAG][@DIGEST]; a `:` before the last `/` is a port.
    let (name_tag, digest) = match image.split_once('@') {
        Some((n, d)) => (n, Some(d)),
        None => (image, None),
    };
    let (name, tag) = match name_tag.rfind(':') {
        Some(i) if !name_tag[i..].contains('/') => (&name_tag[..i], Some(&name_tag[i + 1..])),
        _ => (name_tag, None),
    };
    if let Some(d) = digest {
        // The digest alone, behind a name that is surely valid.
        if let Err(e) = parses(&format!("x@{d}")) {
            return Some(Problem {
                offset: name_tag.len() + 1,
                message: format!("`{d}` is not an image digest ({e})"),
                help: "a digest is `sha256:` and 64 hex digits; leave it out: the recipe names \
                       a tag and `sparkctl images pin` locks its digest in images.lock"
                    .into(),
            });
        }
    }
    if let Some(t) = tag {
        if parses(&format!("x:{t}")).is_err() {
            return Some(Problem {
                offset: name.len() + 1,
                message: format!("`{t}` is not an image tag"),
                help: "a tag is up to 128 letters, digits, '_', '.' and '-', not starting with \
                       '.' or '-', e.g. `cu130-nightly`"
                    .into(),
            });
        }
    }
    // The repository path (after a registry host, which may have capitals and a port).
    let repo_start = match name.split_once('/') {
        Some((host, _)) if host.contains('.') || host.contains(':') || host == "localhost" => {
            host.len() + 1
        }
        _ => 0,
    };
    if let Some(i) = name[repo_start..].find(|c: char| c.is_ascii_uppercase()) {
        let fixed = format!(
            "{}{}",
            &name[..repo_start],
            name[repo_start..].to_lowercase()
        );
        return Some(Problem {
            offset: repo_start + i,
            message: format!("repository `{}` has capital letters", &name[repo_start..]),
            help: format!("repository names are lower-case: `{fixed}`"),
        });
    }
    Some(Problem {
        offset: 0,
        message: format!("`{image}` is not an image reference ({err})"),
        help: "write REPOSITORY[:TAG], e.g. `vllm/vllm-openai:cu130-nightly` or \
               `127.0.0.1:5000/team/server:v1`"
            .into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_references_pass() {
        for ok in [
            "vllm/vllm-openai:cu130-nightly",
            "sparkctl-sim:local",
            "127.0.0.1:5000/vllm/vllm-openai:cu130-nightly",
            "nvcr.io/nvidia/tensorrt-llm/release:1.2.0rc1",
            "busybox",
            &format!("lmsysorg/sglang@sha256:{}", "a".repeat(64)),
        ] {
            assert_eq!(problem(ok), None, "{ok}");
        }
    }

    #[test]
    fn each_bad_part_is_pointed_at() {
        let p = problem("vllm/vllm-openai@sha256:1234").unwrap();
        assert_eq!(p.offset, 17);
        assert!(
            p.message.contains("`sha256:1234` is not an image digest"),
            "{p:?}"
        );
        let p = problem("vllm/vLLM-openai:nightly").unwrap();
        assert_eq!(p.offset, 6);
        assert!(p.help.contains("`vllm/vllm-openai`"), "{p:?}");
        let p = problem("Registry.Example:5000/Team/x:v1").unwrap();
        assert_eq!(p.offset, 22, "{p:?}");
        let p = problem("vllm/vllm-openai:-bad").unwrap();
        assert_eq!(p.offset, 17);
        assert!(p.message.contains("`-bad` is not an image tag"), "{p:?}");
        let p = problem("vllm//openai").unwrap();
        assert_eq!(p.offset, 0);
    }
}
