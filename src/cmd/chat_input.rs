//! The chat's line input: an editor (rustyline, history kept in the XDG
//! data directory) on a terminal, plain lines otherwise, so that scripts
//! piping a conversation see only replies on stdout.

use std::io::{BufRead, IsTerminal};
use std::path::PathBuf;

/// One read from the user.
pub enum Read {
    Line(String),
    /// Ctrl-C at the prompt.
    Interrupted,
    Eof,
}

/// Where lines come from: an editor on a terminal, plain lines otherwise.
pub enum Lines {
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
    pub fn open() -> Self {
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

    pub fn read(&mut self) -> anyhow::Result<Read> {
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
