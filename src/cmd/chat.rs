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
use super::chat_input::{Lines, Read};
use super::model_args::{ModelArgs, SampleArgs, load, warn_ctx_clamped};
use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tiletune_runtime::chat::{CHAT_HELP, Command, Fit, Input, Message, fit_context, parse_input};
use tiletune_runtime::engine::encode_chat;
use tiletune_runtime::models::{Extra, generate_extra};
use tiletune_runtime::sampling::{StopCriteria, StopReason};
use tiletune_runtime::vision::image::read_rgb;
use tiletune_runtime::vision::prompt::ConversationImages;

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
    // The tokens whose keys and values `st` holds, in order (image pads
    // expanded).
    let mut cached: Vec<u32> = Vec::new();
    let mut images = ConversationImages::default();
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
            Input::Image(path) => {
                match read_rgb(path.as_ref()).and_then(|img| l.encode_image(&img)) {
                    Ok(e) => {
                        images.attach(e);
                        eprintln!(
                            "({} image(s) attached to the next message)",
                            images.pending()
                        );
                    }
                    Err(e) => eprintln!("error: {e}"),
                }
                continue;
            }
            Input::Command(Command::Reset) => {
                messages = start.clone();
                images.clear();
                cached.clear();
                st.reset();
                eprintln!("(conversation cleared)");
                continue;
            }
            Input::Say(text) => text,
        };
        messages.push(Message::new("user", &images.message(text)));
        let width = l.cfg.hidden;
        let count = |m: &[Message]| encode(m).map(|t| t.len() + images.extra_tokens(m, width));
        // Room kept for the reply: -n, or with -n -1 a quarter of the
        // context (a longer reply runs on until the context is full).
        let reserve = match args.n {
            usize::MAX => st.capacity() / 4,
            n => n,
        };
        match fit_context(&messages, st.capacity(), reserve, count)? {
            Fit::TooLong { tokens } => {
                if let Some(m) = messages.pop() {
                    images.unsend(&m.content);
                }
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
                    images.keep_for(&messages);
                }
            }
        }
        let full = encode(&messages)?;
        let mm = match images.sent().is_empty() {
            true => None,
            false => Some(l.lay_out(&full, images.sent(), 0)?),
        };
        let full = mm.as_ref().map_or(full, |p| p.ids.clone());
        // Reuse the cached prefix (after a shift, the system prompt's) up to
        // an image it would cut; at least one token must run to get logits.
        let keep = cached
            .iter()
            .zip(&full)
            .take_while(|(a, b)| a == b)
            .count()
            .min(full.len().saturating_sub(1));
        let keep = mm.as_ref().map_or(keep, |p| p.cut(keep));
        let refs = mm
            .as_ref()
            .map(|p| p.embed_refs_from(keep))
            .unwrap_or_default();
        let extra = Extra {
            embeds: &refs,
            positions: mm.as_ref().map(|p| &p.positions[keep..]),
        };
        st.truncate(keep);
        cached.truncate(keep);
        let mut stop = StopCriteria::new(tok.eog_ids(), Vec::new(), args.n)
            .with_interrupt(sigint.stop.clone());
        let mut out = std::io::stdout().lock();
        sigint.begin_reply();
        let res = generate_extra(
            &l.model,
            Some(tok),
            &mut st,
            &full[keep..],
            extra,
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
            if let Some(m) = messages.pop() {
                images.unsend(&m.content);
            }
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
