//! Chat templates: the model's own Jinja template (`tokenizer.chat_template`
//! in GGUF, `chat_template` in `tokenizer_config.json`) rendered with
//! minijinja the way Hugging Face `transformers` renders it (`trim_blocks`,
//! `lstrip_blocks`, `raise_exception`, `tojson`, `strftime_now`, Python string
//! methods such as `.strip()` via minijinja-contrib's pycompat), with a ChatML
//! fallback for models that ship none.

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
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
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
}
