//! `tiletune chat`: a multi-turn chat in the terminal. Each turn renders the
//! whole conversation with the model's chat template, reuses the KV cache for
//! the tokens it shares with what was already run, and streams the reply.
//!
//! On a terminal, lines are read with rustyline (editing, history kept in the
//! XDG data directory); piped input is read line by line with no prompt, so
//! scripts see only replies on stdout. Ctrl-C stops a reply; what the lines
//! mean and which turns fit the context are decided in
//! `tiletune_runtime::chat` (`parse_input`, `fit_context`).

use super::Global;
use super::model_args::{ModelArgs, SampleArgs, load, warn_ctx_clamped};
use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tiletune_runtime::chat::{CHAT_HELP, Command, Fit, Input, Message, fit_context, parse_input};
use tiletune_runtime::engine::encode_chat;
use tiletune_runtime::models::generate_fast;
use tiletune_runtime::sampling::{StopCriteria, StopReason};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub m: ModelArgs,
    #[command(flatten)]
    pub s: SampleArgs,
    /// Most tokens per reply; -1 lets a reply run until the end of text or a
    /// full context.
    #[arg(short = 'n', long = "n-predict", default_value = "512",
          allow_negative_numbers = true, value_parser = super::parse_n_predict)]
    pub n: usize,
    /// Context size (KV cache positions).
    #[arg(
        long = "ctx",
        short = 'c',
        visible_alias = "ctx-size",
        default_value_t = 4096
    )]
    pub ctx: usize,
    /// A system message to start every conversation with.
    #[arg(long)]
    pub system: Option<String>,
}

pub fn run(g: &Global, mut args: Args) -> anyhow::Result<ExitCode> {
    args.m.resolve()?;
    let sigint = Sigint::install();
    let l = load(&args.m, args.ctx)?;
    warn_ctx_clamped(&l, args.ctx);
    if g.verbose {
        eprintln!("{}", l.plan.summary());
    }
    let tok = l.tokenizer()?;
    let template = l.chat_template()?;
    let mut sampler = args.s.sampler()?;
    let mut st = l.model.new_state();
    let start: Vec<Message> = args
        .system
        .iter()
        .map(|s| Message::new("system", s))
        .collect();
    let mut messages = start.clone();
    // The tokens whose keys and values `st` holds, in order.
    let mut cached: Vec<u32> = Vec::new();
    let mut input = Lines::open();
    eprintln!(
        "chat with {} (/help for commands, Ctrl-C stops a reply)",
        args.m.model.display()
    );
    let encode = |m: &[Message]| -> anyhow::Result<Vec<u32>> {
        Ok(encode_chat(tok, &template.render(m, true)?)?)
    };
    loop {
        let line = match input.read()? {
            Read::Line(line) => line,
            Read::Eof => break,
            Read::Interrupted => continue,
        };
        let text = match parse_input(&line) {
            Input::Empty => continue,
            Input::Invalid(e) => {
                eprintln!("error: {e}");
                continue;
            }
            Input::Command(Command::Help) => {
                eprintln!("{CHAT_HELP}");
                continue;
            }
            Input::Command(Command::Quit) => break,
            Input::Command(Command::Reset) => {
                messages = start.clone();
                cached.clear();
                st.reset();
                eprintln!("(conversation cleared)");
                continue;
            }
            Input::Say(text) => text,
        };
        messages.push(Message::new("user", text));
        let count = |m: &[Message]| encode(m).map(|t| t.len());
        // Room kept for the reply: -n, or with -n -1 a quarter of the
        // context (a longer reply runs on until the context is full).
        let reserve = match args.n {
            usize::MAX => st.capacity() / 4,
            n => n,
        };
        match fit_context(&messages, st.capacity(), reserve, count)? {
            Fit::TooLong { tokens } => {
                messages.pop();
                eprintln!(
                    "(not sent: this message makes a {tokens}-token prompt and the context holds {}; shorten it or raise --ctx)",
                    st.capacity()
                );
                continue;
            }
            Fit::Fits {
                messages: kept,
                dropped,
                ..
            } => {
                if dropped > 0 {
                    let which = match dropped {
                        1 => "the oldest turn".to_string(),
                        n => format!("the {n} oldest turns"),
                    };
                    eprintln!("(context full: dropped {which})");
                    messages = kept;
                }
            }
        }
        let full = encode(&messages)?;
        // Reuse the cached prefix (after a shift, the system prompt's); at
        // least one token must run to get logits.
        let keep = cached
            .iter()
            .zip(&full)
            .take_while(|(a, b)| a == b)
            .count()
            .min(full.len().saturating_sub(1));
        st.truncate(keep);
        cached.truncate(keep);
        let mut stop = StopCriteria::new(tok.eog_ids(), Vec::new(), args.n)
            .with_interrupt(sigint.stop.clone());
        let mut out = std::io::stdout().lock();
        sigint.begin_reply();
        let res = generate_fast(
            &l.model,
            Some(tok),
            &mut st,
            &full[keep..],
            &mut sampler,
            &mut stop,
            |t| {
                let _ = write!(out, "{t}");
                let _ = out.flush();
            },
            |_| {},
        );
        sigint.end_reply();
        let res = res?;
        if res.tokens.is_empty() {
            // Ctrl-C during the prefill: `st` holds what it held before, and
            // the conversation goes back to that too.
            drop(out);
            messages.pop();
            eprintln!("(stopped before the reply began; the message was not sent)");
            continue;
        }
        writeln!(out)?;
        drop(out);
        cached.extend_from_slice(&full[keep..]);
        // Every sampled token but the last went through the model.
        let fed = res.tokens.len().saturating_sub(1);
        cached.extend_from_slice(&res.tokens[..fed]);
        messages.push(Message::new("assistant", res.text.trim()));
        match res.stop {
            StopReason::Interrupted => eprintln!("(stopped)"),
            StopReason::MaxTokens => eprintln!("(reply cut at -n {} tokens)", args.n),
            StopReason::ContextFull => eprintln!(
                "(reply cut: the context is full at {} positions; the next turn drops the oldest turns, or raise --ctx)",
                st.capacity()
            ),
            StopReason::Eog | StopReason::StopString => {}
        }
        if g.verbose {
            let dec = fed as f64 / res.decode_time.as_secs_f64().max(1e-9);
            eprintln!("({} tokens, {dec:.1} tok/s)", res.tokens.len());
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// What Ctrl-C does: during a reply it raises `stop`, which the prefill reads
/// before each layer and the generation's [`StopCriteria`] at each token; a
/// second press before the reply stops, or a press outside a reply, leaves
/// with the shell's 130. At a terminal prompt rustyline has the terminal in
/// raw mode, so Ctrl-C arrives there as a key, and rustyline catches SIGINT
/// itself while it reads: a signal sent from outside acts as the key does
/// and the terminal is put back before the chat leaves.
struct Sigint {
    stop: Arc<AtomicBool>,
    replying: Arc<AtomicBool>,
}

impl Sigint {
    fn install() -> Self {
        let s = Sigint {
            stop: Arc::new(AtomicBool::new(false)),
            replying: Arc::new(AtomicBool::new(false)),
        };
        let (stop, replying) = (s.stop.clone(), s.replying.clone());
        let handler = move || {
            if replying.load(Ordering::SeqCst) && !stop.swap(true, Ordering::SeqCst) {
                return;
            }
            std::process::exit(130);
        };
        if let Err(e) = ctrlc::set_handler(handler) {
            eprintln!(
                "warning: cannot catch Ctrl-C ({e}); it will end the chat, not only the reply"
            );
        }
        s
    }

    fn begin_reply(&self) {
        self.stop.store(false, Ordering::SeqCst);
        self.replying.store(true, Ordering::SeqCst);
    }

    fn end_reply(&self) {
        self.replying.store(false, Ordering::SeqCst);
    }
}

/// One read from the user.
enum Read {
    Line(String),
    /// Ctrl-C at the prompt.
    Interrupted,
    Eof,
}

/// Where lines come from: an editor on a terminal, plain lines otherwise.
enum Lines {
    Editor {
        ed: Box<rustyline::DefaultEditor>,
        history: Option<PathBuf>,
        /// Ctrl-C was the last key at the prompt: another one leaves.
        interrupted: bool,
    },
    /// `prompt`: stdin is a terminal but stdout is not (a reply logged to a
    /// file), so the prompt goes to stderr and the log holds only replies.
    Plain {
        lines: std::io::Lines<std::io::StdinLock<'static>>,
        prompt: bool,
    },
}

impl Lines {
    fn open() -> Self {
        let plain = |prompt| Lines::Plain {
            lines: std::io::stdin().lock().lines(),
            prompt,
        };
        // rustyline prints its prompt on stdout, which must hold only replies
        // when it is not the terminal.
        match (
            std::io::stdin().is_terminal(),
            std::io::stdout().is_terminal(),
        ) {
            (false, _) => return plain(false),
            (true, false) => return plain(true),
            (true, true) => {}
        }
        let cfg = rustyline::Config::builder()
            .auto_add_history(true)
            .history_ignore_dups(true)
            .and_then(|b| Ok(b.history_ignore_space(true).max_history_size(1000)?.build()));
        let ed = match cfg.and_then(rustyline::DefaultEditor::with_config) {
            Ok(ed) => ed,
            Err(e) => {
                eprintln!("warning: no line editing ({e}); reading plain lines");
                return plain(true);
            }
        };
        let mut ed = Box::new(ed);
        let history = history_path();
        match &history {
            None => eprintln!("warning: no home or XDG data directory; chat history is not saved"),
            Some(p) => match ed.load_history(p) {
                Err(rustyline::error::ReadlineError::Io(e))
                    if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => eprintln!(
                    "warning: cannot read chat history {} ({e}); starting without it",
                    p.display()
                ),
                Ok(()) => {}
            },
        }
        Lines::Editor {
            ed,
            history,
            interrupted: false,
        }
    }

    fn read(&mut self) -> anyhow::Result<Read> {
        use rustyline::error::ReadlineError;
        match self {
            Lines::Plain { lines, prompt } => {
                if *prompt {
                    eprint!("> ");
                }
                match lines.next() {
                    None => Ok(Read::Eof),
                    Some(line) => Ok(Read::Line(line?)),
                }
            }
            Lines::Editor {
                ed, interrupted, ..
            } => match ed.readline("> ") {
                Ok(line) => {
                    *interrupted = false;
                    self.save_history();
                    Ok(Read::Line(line))
                }
                Err(ReadlineError::Interrupted) if *interrupted => Ok(Read::Eof),
                Err(ReadlineError::Interrupted) => {
                    *interrupted = true;
                    eprintln!("(Ctrl-C again, Ctrl-D or /quit to leave)");
                    Ok(Read::Interrupted)
                }
                Err(ReadlineError::Eof) => Ok(Read::Eof),
                Err(e) => Err(anyhow::anyhow!("cannot read the terminal: {e}")),
            },
        }
    }

    /// Appends the new lines to the history file. After each line, so that a
    /// Ctrl-C during a prefill (which exits) loses nothing; one failure warns
    /// and turns saving off.
    fn save_history(&mut self) {
        let Lines::Editor { ed, history, .. } = self else {
            return;
        };
        let Some(p) = history.as_ref() else { return };
        let dir_ok = p
            .parent()
            .is_none_or(|d| d.as_os_str().is_empty() || std::fs::create_dir_all(d).is_ok());
        let res = match dir_ok {
            true => ed.append_history(p).map_err(|e| e.to_string()),
            false => Err("cannot create its directory".to_string()),
        };
        if let Err(e) = res {
            eprintln!(
                "warning: cannot save chat history to {} ({e}); history is kept for this session only",
                p.display()
            );
            *history = None;
        }
    }
}

/// `chat_history` in tiletune's data directory, the one the default selector
/// table lives in (`$XDG_DATA_HOME/tiletune`, else `~/.local/share/tiletune`);
/// `$TILETUNE_DB` moves only the table. None without a home directory.
fn history_path() -> Option<PathBuf> {
    use tiletune_tables::path::{DB_ENV, default_db_path_from};
    let db = default_db_path_from(|k| match k == DB_ENV {
        true => None,
        false => std::env::var_os(k),
    });
    let dir = db.parent().filter(|d| !d.as_os_str().is_empty())?;
    Some(dir.join("chat_history"))
}
