//! `tiletune chat`: a multi-turn chat in the terminal. Each turn renders the
//! whole conversation with the model's chat template, reuses the KV cache for
//! the tokens it shares with what was already run, and streams the reply.
//! `/reset` forgets the conversation, `/quit` (or end of input) leaves.

use super::Global;
use super::run::{ModelArgs, SampleArgs, encode_chat, load};
use std::io::{BufRead, Write};
use std::process::ExitCode;
use tiletune_runtime::chat::{ChatTemplate, Message};
use tiletune_runtime::models::generate_fast;
use tiletune_runtime::sampling::StopCriteria;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub m: ModelArgs,
    #[command(flatten)]
    pub s: SampleArgs,
    /// Most tokens per reply.
    #[arg(short = 'n', long = "n-predict", default_value_t = 512)]
    pub n: usize,
    /// Context size (KV cache positions).
    #[arg(long, default_value_t = 4096)]
    pub ctx: usize,
    /// A system message to start every conversation with.
    #[arg(long)]
    pub system: Option<String>,
}

pub fn run(g: &Global, args: Args) -> anyhow::Result<ExitCode> {
    let l = load(&args.m, args.ctx)?;
    if g.verbose {
        eprintln!("{}", l.plan.summary());
    }
    let template = ChatTemplate::from_gguf(&l.gguf, l.tok()?)?;
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
    eprintln!("chat with {} (/reset, /quit)", args.m.model.display());
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    loop {
        eprint!("> ");
        let Some(line) = lines.next() else { break };
        let line = line?;
        match line.trim() {
            "/quit" | "/exit" => break,
            "/reset" => {
                messages = start.clone();
                cached.clear();
                st.reset();
                eprintln!("(conversation cleared)");
                continue;
            }
            "" => continue,
            _ => {}
        }
        messages.push(Message::new("user", line.trim()));
        let full = encode_chat(l.tok()?, &template.render(&messages, true)?)?;
        // Reuse the cached prefix; at least one token must run to get logits.
        let mut keep = cached.iter().zip(&full).take_while(|(a, b)| a == b).count();
        keep = keep.min(full.len().saturating_sub(1));
        if full.len() + args.n > st.capacity() {
            eprintln!("(context full: conversation cleared)");
            messages = start.clone();
            messages.push(Message::new("user", line.trim()));
            cached.clear();
            st.reset();
            keep = 0;
        }
        let full = if keep == 0 {
            encode_chat(l.tok()?, &template.render(&messages, true)?)?
        } else {
            full
        };
        st.truncate(keep);
        cached.truncate(keep);
        let mut stop = StopCriteria::new(l.tok()?.eog_ids(), Vec::new(), args.n);
        let mut out = std::io::stdout().lock();
        let res = generate_fast(
            &l.model,
            l.tok()?,
            &mut st,
            &full[keep..],
            &mut sampler,
            &mut stop,
            |t| {
                let _ = write!(out, "{t}");
                let _ = out.flush();
            },
            |_| {},
        )?;
        writeln!(out)?;
        cached.extend_from_slice(&full[keep..]);
        // Every sampled token but the last went through the model.
        let fed = res.tokens.len().saturating_sub(1);
        cached.extend_from_slice(&res.tokens[..fed]);
        messages.push(Message::new("assistant", res.text.trim()));
        if g.verbose {
            let dec = fed as f64 / res.decode_time.as_secs_f64().max(1e-9);
            eprintln!("({} tokens, {dec:.1} tok/s)", res.tokens.len());
        }
    }
    Ok(ExitCode::SUCCESS)
}
