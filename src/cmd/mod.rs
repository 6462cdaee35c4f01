//! One module per subcommand. Each exposes `Args` (clap) and
//! `run(&Global, Args) -> anyhow::Result<ExitCode>`.

pub mod bench;
mod bench_image;
pub mod bench_model;
pub mod bench_roofline;
pub mod cache;
pub mod chat;
mod chat_input;
pub mod compare;
pub mod convert;
pub mod model_args;
pub mod plan;
pub mod ppl;
pub mod probe;
pub mod pull;
pub mod quantize;
pub mod remote;
pub mod report;
pub mod run;
pub mod table;
mod table_show;
pub mod tune;

/// Flags every subcommand sees.
#[derive(Debug, Clone, Copy)]
#[allow(dead_code)] // read by later subcommands
pub struct Global {
    pub json: bool,
    pub verbose: bool,
}

/// A `--dtype`/`--dtypes` value: the kernels' dtype names are lower case,
/// and llama.cpp spells the K-quants `q4_K`, `q6_K`, so either is taken.
pub fn parse_dtype(s: &str) -> Result<String, String> {
    Ok(s.to_ascii_lowercase())
}

/// Most worker threads a command accepts: more than any machine tiletune
/// runs on has cores, and few enough that a typo is refused, not spawned.
pub const MAX_THREADS: usize = 1024;

/// A `-t`/`--threads` value: 1 to [`MAX_THREADS`]; 0 is refused rather
/// than read as 1, which would run something the user did not ask for.
pub fn parse_threads(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(0) => Err("0 threads cannot run anything; use 1 or more".into()),
        Ok(t) if t <= MAX_THREADS => Ok(t),
        Ok(t) => Err(format!(
            "{t} threads is more than the {MAX_THREADS} tiletune accepts"
        )),
        Err(_) => Err(format!("`{s}` is not a thread count; use e.g. -t 4")),
    }
}

/// `-n`/`--n-predict`: a token count, or -1 for "until the end of text or
/// a full context" (llama.cpp's meaning).
pub fn parse_n_predict(s: &str) -> Result<usize, String> {
    match s.trim() {
        "-1" => Ok(usize::MAX),
        t => t.parse::<usize>().map_err(|_| {
            format!("`{s}` is not a token count; use a number of tokens, or -1 for until the end of text")
        }),
    }
}

/// An error and its causes on one line, `outer: cause: …`, as anyhow's
/// `{:#}` prints it, less each cause whose text the line already holds: the
/// libraries' errors name their I/O cause in their own message (so one
/// printed alone says what failed) and keep it as their source too.
pub fn error_text(err: &(dyn std::error::Error + 'static)) -> String {
    let mut out = String::new();
    let mut next = Some(err);
    while let Some(cause) = next {
        next = cause.source();
        let s = cause.to_string();
        if out.contains(&s) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&s);
    }
    out
}

/// Says so on stderr when `threads` is more than the CPUs this process may
/// run on: the extra workers share CPUs and spin against each other.
pub fn warn_oversubscribed(threads: usize) {
    let cpus = tiletune_kernels::pool::allowed_cpus().len().max(1);
    if threads > cpus {
        eprintln!(
            "warning: {threads} threads on the {cpus} CPU(s) this process may run on: workers will share CPUs and run slower; use -t {cpus} or fewer"
        );
    }
}
