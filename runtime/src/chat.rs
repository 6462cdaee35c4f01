//! Chat templates: the model's own Jinja template (`tokenizer.chat_template`
//! in GGUF, `chat_template` in `tokenizer_config.json`) rendered with
//! minijinja the way Hugging Face `transformers` renders it (`trim_blocks`,
//! `lstrip_blocks`, `raise_exception`, `tojson`, `strftime_now`, Python string
//! methods such as `.strip()` via minijinja-contrib's pycompat), with a ChatML
//! fallback for models that ship none; and the two decisions an interactive
//! chat makes each turn that need no terminal: what a typed line means
//! ([`parse_input`]) and which turns still fit in the context ([`fit_context`]).

use crate::error::{LoadError, Result};
use crate::gguf::GgufFile;
use crate::tokenizer::Tokenizer;
use minijinja::{Environment, Error as JinjaError, ErrorKind, context};

/// ChatML, used when the model has no template.
pub const CHATML: &str = "{% for message in messages %}\
{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}\
{% endfor %}\
{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/// One chat turn.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Message {
    pub role: String,
    pub content: String,
}

impl Message {
    /// A message with `role` and `content`.
    pub fn new(role: &str, content: &str) -> Self {
        Message {
            role: role.to_string(),
            content: content.to_string(),
        }
    }
}

/// Template instructions one render may execute. A turn of a real template
/// costs hundreds, so this covers tens of thousands of turns, while a hostile
/// template (a GGUF carries its own) that loops stops with an error in well
/// under a second instead of hanging.
pub const TEMPLATE_FUEL: u64 = 5_000_000;

/// A compiled chat template with the model's BOS/EOS strings.
pub struct ChatTemplate {
    env: Environment<'static>,
    bos_token: String,
    eos_token: String,
    fallback: bool,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("fallback", &self.fallback)
            .finish()
    }
}

impl ChatTemplate {
    /// Compiles `source`; `bos_token`/`eos_token` are the strings templates see.
    pub fn new(source: &str, bos_token: &str, eos_token: &str) -> Result<Self> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_fuel(Some(TEMPLATE_FUEL));
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function(
            "raise_exception",
            |msg: String| -> std::result::Result<String, JinjaError> {
                Err(JinjaError::new(ErrorKind::InvalidOperation, msg))
            },
        );
        env.add_function("strftime_now", |fmt: String| strftime_now(&fmt));
        env.add_template_owned("chat", source.to_string())
            .map_err(|e| LoadError::Template(format!("does not compile: {e}")))?;
        Ok(ChatTemplate {
            env,
            bos_token: bos_token.to_string(),
            eos_token: eos_token.to_string(),
            fallback: false,
        })
    }

    /// The ChatML fallback.
    pub fn chatml() -> Self {
        let mut t = Self::new(CHATML, "", "<|im_end|>").expect("chatml template compiles");
        t.fallback = true;
        t
    }

    /// The model's template from GGUF metadata, or ChatML when it has none.
    pub fn from_gguf(g: &GgufFile, tok: &Tokenizer) -> Result<Self> {
        match g.get("tokenizer.chat_template") {
            None => Ok(Self::chatml()),
            Some(_) => Self::for_tokenizer(g.get_str("tokenizer.chat_template")?, tok),
        }
    }

    /// Compiles `source` with BOS/EOS strings taken from `tok`.
    pub fn for_tokenizer(source: &str, tok: &Tokenizer) -> Result<Self> {
        let s = |id: Option<u32>| id.and_then(|i| tok.token_str(i)).unwrap_or("").to_string();
        Self::new(source, &s(tok.bos()), &s(tok.eos()))
    }

    /// True when this is the ChatML fallback rather than the model's template.
    pub fn is_fallback(&self) -> bool {
        self.fallback
    }

    /// Renders `messages`; `add_generation_prompt` appends the assistant header.
    pub fn render(&self, messages: &[Message], add_generation_prompt: bool) -> Result<String> {
        let tmpl = self
            .env
            .get_template("chat")
            .map_err(|e| LoadError::Template(e.to_string()))?;
        tmpl.render(context! {
            messages => messages,
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos_token,
            eos_token => self.eos_token,
        })
        .map_err(|e| LoadError::Template(format!("render failed: {e:#}")))
    }
}

/// A slash command of an interactive chat.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    Help,
    Reset,
    Quit,
}

/// What one typed line asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Input<'a> {
    /// Blank: nothing to do.
    Empty,
    /// Text to send to the model as the user's turn.
    Say(&'a str),
    Command(Command),
    /// `/image FILE`: a picture for the next message (vision models).
    Image(&'a str),
    /// Not sent anywhere: the message says what was wrong.
    Invalid(String),
}

/// The commands and keys of an interactive chat, one per line, for `/help`.
pub const CHAT_HELP: &str = "\
/help          list these commands
/reset         forget the conversation (the --system message stays)
/image FILE    attach a PNG or JPEG picture to the next message (vision models)
/quit, /exit   leave (so does Ctrl-D at the prompt)
//text         send the line \"/text\" to the model (a leading / is a command)
Ctrl-C         stop the reply being written; at the prompt, twice in a row leaves";

/// Reads one line of a chat: a leading `/` makes it a command, `//` escapes
/// a literal slash, anything else (trimmed) is the user's turn. Commands take
/// no arguments, so `/reset now` is refused rather than half-obeyed.
pub fn parse_input(line: &str) -> Input<'_> {
    let t = line.trim();
    if t.is_empty() {
        return Input::Empty;
    }
    if let Some(escaped) = t.strip_prefix("//") {
        return Input::Say(&t[t.len() - escaped.len() - 1..]);
    }
    let Some(rest) = t.strip_prefix('/') else {
        return Input::Say(t);
    };
    let (word, args) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
    if word == "image" {
        return match args.trim() {
            "" => Input::Invalid("/image takes a file: /image photo.png".into()),
            path => Input::Image(path),
        };
    }
    let cmd = match word {
        "help" | "?" => Command::Help,
        "reset" => Command::Reset,
        "quit" | "exit" => Command::Quit,
        _ => {
            return Input::Invalid(format!(
                "unknown command /{word}; /help lists the commands (start the line with // to send it to the model)"
            ));
        }
    };
    if !args.trim().is_empty() {
        return Input::Invalid(format!(
            "/{word} takes no arguments; /help lists the commands"
        ));
    }
    Input::Command(cmd)
}

/// What [`fit_context`] decided for the next turn.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fit {
    /// Run `messages`: the leading system messages and the newest turns,
    /// `dropped` older turns left out; their prompt takes `tokens` positions.
    Fits {
        messages: Vec<Message>,
        dropped: usize,
        tokens: usize,
    },
    /// The system messages and the newest turn alone take `tokens` positions,
    /// which leaves no room for a reply in the context.
    TooLong { tokens: usize },
}

/// Chooses which turns of `messages` go into the next prompt so that it and
/// a reply of `reserve` tokens fit in `capacity` positions. The leading
/// system messages always stay; a turn (a user message and the replies after
/// it) goes whole, oldest first. `count` gives the prompt length of a list of
/// messages: it is measured on the rendered conversation rather than summed
/// per message because a template adds text between and around turns.
///
/// When even the newest turn alone leaves fewer than `reserve` positions but
/// some, it is kept with every older turn dropped: the reply then ends at the
/// context limit instead of the turn being refused. Only a prompt that fills
/// the whole context is [`Fit::TooLong`].
pub fn fit_context<E>(
    messages: &[Message],
    capacity: usize,
    reserve: usize,
    mut count: impl FnMut(&[Message]) -> std::result::Result<usize, E>,
) -> std::result::Result<Fit, E> {
    let system = messages.iter().take_while(|m| m.role == "system").count();
    // Where each turn starts; a conversation that opens with a reply
    // (no user message yet) counts that reply as a turn of its own.
    let starts: Vec<usize> = (system..messages.len())
        .filter(|&i| i == system || messages[i].role == "user")
        .collect();
    let with_tail = |from: usize| -> Vec<Message> {
        let mut v = messages[..system].to_vec();
        v.extend_from_slice(&messages[from..]);
        v
    };
    if starts.is_empty() {
        let tokens = count(messages)?;
        return Ok(match tokens < capacity {
            true => Fit::Fits {
                messages: messages.to_vec(),
                dropped: 0,
                tokens,
            },
            false => Fit::TooLong { tokens },
        });
    }
    let mut tokens = 0;
    for (dropped, &from) in starts.iter().enumerate() {
        let kept = with_tail(from);
        tokens = count(&kept)?;
        let newest = dropped + 1 == starts.len();
        if tokens.saturating_add(reserve) <= capacity || (newest && tokens < capacity) {
            return Ok(Fit::Fits {
                messages: kept,
                dropped,
                tokens,
            });
        }
    }
    Ok(Fit::TooLong { tokens })
}

/// `strftime_now(fmt)` for templates that print today's date (Llama 3.x):
/// supports %Y %m %d %e %B %b %H %M %S %%, in UTC.
fn strftime_now(fmt: &str) -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format_utc(secs, fmt)
}

fn format_utc(secs: u64, fmt: &str) -> String {
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    let t = tiletune_tables::UtcTime::from_unix(i64::try_from(secs).unwrap_or(i64::MAX));
    let (y, m, d, rem) = (t.year, t.month, t.day, t.secs);
    let mut out = String::new();
    let mut chars = fmt.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('Y') => out.push_str(&y.to_string()),
            Some('m') => out.push_str(&format!("{m:02}")),
            Some('d') => out.push_str(&format!("{d:02}")),
            Some('e') => out.push_str(&format!("{d:>2}")),
            Some('B') => out.push_str(MONTHS[(m - 1) as usize]),
            Some('b') => out.push_str(&MONTHS[(m - 1) as usize][..3]),
            Some('H') => out.push_str(&format!("{:02}", rem / 3600)),
            Some('M') => out.push_str(&format!("{:02}", rem / 60 % 60)),
            Some('S') => out.push_str(&format!("{:02}", rem % 60)),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chatml_fallback_renders_turns() {
        let t = ChatTemplate::chatml();
        assert!(t.is_fallback());
        let msgs = [
            Message::new("system", "Be brief."),
            Message::new("user", "Hi"),
        ];
        assert_eq!(
            t.render(&msgs, true).unwrap(),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        );
        assert!(!t.render(&msgs, false).unwrap().ends_with("assistant\n"));
    }

    #[test]
    fn hf_features_work() {
        let src = "{{ bos_token }}{% for m in messages %}{% if m.role not in ['user', 'assistant'] %}\
            {{ raise_exception('only user and assistant roles are supported') }}{% endif %}\
            {{ m.content.strip() | tojson }}{% if m.content.strip().startswith('x') %}!{% endif %}\n{% endfor %}\
            {{ strftime_now('%Y') | length }}";
        let t = ChatTemplate::new(src, "<s>", "</s>").unwrap();
        let out = t.render(&[Message::new("user", "  x\"y ")], false).unwrap();
        // trim_blocks eats the newline after `{% endif %}`, as in jinja2.
        assert_eq!(out, "<s>\"x\\\"y\"!4");
        let e = t
            .render(&[Message::new("system", "s")], false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("only user and assistant"), "{e}");
    }

    #[test]
    fn trim_and_lstrip_blocks_match_hf() {
        // transformers renders with trim_blocks and lstrip_blocks on.
        let src = "{% for m in messages %}\n    {{ m.content }}\n{% endfor %}\n";
        let t = ChatTemplate::new(src, "", "").unwrap();
        assert_eq!(
            t.render(
                &[Message::new("user", "a"), Message::new("user", "b")],
                false
            )
            .unwrap(),
            "    a\n    b\n"
        );
    }

    #[test]
    fn bad_templates_are_errors() {
        assert!(ChatTemplate::new("{% for %}", "", "").is_err());
        let t = ChatTemplate::new("{{ messages[0].content + 1 }}", "", "").unwrap();
        assert!(t.render(&[Message::new("user", "a")], false).is_err());
    }

    #[test]
    fn dates_format_in_utc() {
        // 2024-02-29 13:05:09 UTC.
        assert_eq!(
            format_utc(1_709_211_909, "%d %b %Y %H:%M:%S %B %%"),
            "29 Feb 2024 13:05:09 February %"
        );
        assert_eq!(format_utc(0, "%Y-%m-%d"), "1970-01-01");
    }

    #[test]
    fn lines_parse_into_turns_commands_and_errors() {
        assert_eq!(parse_input("  \t"), Input::Empty);
        assert_eq!(parse_input("  hello there \n"), Input::Say("hello there"));
        assert_eq!(parse_input("/help"), Input::Command(Command::Help));
        assert_eq!(parse_input(" /? "), Input::Command(Command::Help));
        assert_eq!(parse_input("/reset"), Input::Command(Command::Reset));
        assert_eq!(parse_input("/quit"), Input::Command(Command::Quit));
        assert_eq!(parse_input("/exit"), Input::Command(Command::Quit));
        assert_eq!(parse_input("//usr/bin is"), Input::Say("/usr/bin is"));
        assert_eq!(parse_input("//"), Input::Say("/"));
        let Input::Invalid(e) = parse_input("/frobnicate now") else {
            panic!("an unknown command is refused")
        };
        assert!(e.contains("/frobnicate") && e.contains("/help"), "{e}");
        let Input::Invalid(e) = parse_input("/reset please") else {
            panic!("arguments are refused")
        };
        assert!(e.contains("/reset takes no arguments"), "{e}");
        assert!(matches!(parse_input("/"), Input::Invalid(_)));
        // Every command parse_input knows is listed in the help.
        assert_eq!(parse_input("/image  a b.png "), Input::Image("a b.png"));
        assert!(matches!(parse_input("/image"), Input::Invalid(_)));
        for c in ["/help", "/reset", "/quit", "/exit", "//", "/image"] {
            assert!(CHAT_HELP.contains(c), "{c}");
        }
    }

    /// Prompt length: 3 per message (a template's framing) plus its content length.
    fn count(m: &[Message]) -> Result<usize> {
        Ok(m.iter().map(|m| 3 + m.content.len()).sum())
    }

    fn conv(parts: &[(&str, &str)]) -> Vec<Message> {
        parts.iter().map(|(r, c)| Message::new(r, c)).collect()
    }

    #[test]
    fn oldest_turns_go_first_and_the_system_message_stays() {
        let m = conv(&[
            ("system", "sys"),     // 6
            ("user", "aaaa"),      // 7
            ("assistant", "bbbb"), // 7
            ("user", "cccc"),      // 7
            ("assistant", "dddd"), // 7
            ("user", "eeee"),      // 7
        ]);
        let fits = |from: usize, dropped, tokens| Fit::Fits {
            messages: [&m[..1], &m[from..]].concat(),
            dropped,
            tokens,
        };
        // Everything fits: 41 + 9 <= 50.
        assert_eq!(fit_context(&m, 50, 9, count).unwrap(), fits(1, 0, 41));
        // One turn (user + reply) must go: 27 + 9 <= 40 < 41 + 9.
        assert_eq!(fit_context(&m, 40, 9, count).unwrap(), fits(3, 1, 27));
        // Both old turns go; the newest and the system message stay.
        assert_eq!(fit_context(&m, 25, 9, count).unwrap(), fits(5, 2, 13));
    }

    #[test]
    fn a_newest_turn_too_long_for_the_context_is_refused() {
        let m = conv(&[
            ("system", "sys"),
            ("user", "aaaa"),
            ("assistant", "b"),
            ("user", "cccc"),
        ]);
        // 13 positions leave less than the reserve but some: kept, the reply is short.
        let newest = Fit::Fits {
            messages: [&m[..1], &m[3..]].concat(),
            dropped: 1,
            tokens: 13,
        };
        assert_eq!(fit_context(&m, 14, 9, count).unwrap(), newest);
        // 13 positions in a context of 13 leave nothing.
        assert_eq!(
            fit_context(&m, 13, 9, count).unwrap(),
            Fit::TooLong { tokens: 13 }
        );
        assert_eq!(
            fit_context(&m[1..2], 7, 1, count).unwrap(),
            Fit::TooLong { tokens: 7 }
        );
        // Errors of the counter are passed on.
        let e = fit_context(&m, 100, 1, |_| Err::<usize, _>("no tokenizer")).unwrap_err();
        assert_eq!(e, "no tokenizer");
    }
}
