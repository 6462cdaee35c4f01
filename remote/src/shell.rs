//! The device's shell language, the one place commands for it are spelled:
//! quoting, and the exit marker that tells a command that ended from a
//! connection that dropped.
//!
//! `adb shell` and `ssh` both hand one string to a POSIX shell on the device
//! (mksh on Android, sh or bash elsewhere). A command whose connection drops
//! ends with the same non-zero status as one that failed, so every streamed
//! command ends with `printf '\n@@tiletune-exit %d\n' $?`: the marker seen
//! means the command ended with that status, no marker means the connection
//! was lost. The marker is cut from the stream byte-exactly, so the
//! command's own output (a generated text without a final newline) reaches
//! the user unchanged.
//!
//! Pushed executables run as one quoted absolute path (`'DIR/bin/NAME'
//! ARGS`, see [`exec`]); every other command names files in `bin/` relative
//! to it, so that form is the only one in which a `bin/` path is quoted. A
//! test device that runs aarch64 binaries under qemu-user recognises it.

/// `s` as one shell word.
pub fn quote(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"@%+=:,./-_".contains(&b))
    {
        return s.to_string();
    }
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Runs the pushed executable `bin` (a path in the device's `bin/`) with
/// `args`, in `dir`, with `env` set: the one form in which commands run a
/// pushed binary.
pub fn exec(dir: &str, env: &[(&str, &str)], bin: &str, args: &[String]) -> String {
    let mut cmd = format!("cd {} &&", quote(dir));
    for (k, v) in env {
        cmd.push_str(&format!(" {k}={}", quote(v)));
    }
    cmd.push_str(&format!(" '{}'", bin.replace('\'', r"'\''")));
    for a in args {
        cmd.push(' ');
        cmd.push_str(&quote(a));
    }
    cmd
}

const MARK: &[u8] = b"\n@@tiletune-exit ";

/// `cmd` followed by the exit marker.
pub fn with_exit_marker(cmd: &str) -> String {
    format!("{cmd}; printf '\\n@@tiletune-exit %d\\n' $?")
}

/// How a streamed command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The command ended on the device with this status.
    Exited(i32),
    /// The stream closed without the marker: the connection dropped (or
    /// the device's shell was killed).
    Lost,
}

/// Passes a command's stdout through while holding back what may be the
/// start of the exit marker, then reads the marker at the end.
#[derive(Debug, Default)]
pub struct MarkerFilter {
    pending: Vec<u8>,
}

/// The longest tail the marker can take: `\n@@tiletune-exit -2147483648\n`.
const HOLD: usize = MARK.len() + 12;

impl MarkerFilter {
    /// Takes a chunk; returns the bytes that are certainly output.
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<u8> {
        self.pending.extend_from_slice(chunk);
        let keep = self.pending.len().min(HOLD);
        let cut = self.pending.len() - keep;
        self.pending.drain(..cut).collect()
    }

    /// At the end of the stream: the rest of the output and how it ended.
    pub fn finish(self) -> (Vec<u8>, End) {
        let p = self.pending;
        if let Some(at) = p.windows(MARK.len()).rposition(|w| w == MARK) {
            let tail = &p[at + MARK.len()..];
            let text = String::from_utf8_lossy(tail);
            if let Some(code) = text.strip_suffix('\n').and_then(|t| t.trim().parse().ok()) {
                return (p[..at].to_vec(), End::Exited(code));
            }
        }
        (p, End::Lost)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_keeps_plain_words_and_escapes_the_rest() {
        assert_eq!(quote("--budget"), "--budget");
        assert_eq!(quote("/data/local/tmp/x.gguf"), "/data/local/tmp/x.gguf");
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote("it's"), r"'it'\''s'");
        assert_eq!(quote(""), "''");
        assert_eq!(quote("$(rm -rf /)"), "'$(rm -rf /)'");
    }

    #[test]
    fn exec_quotes_the_binary_and_its_arguments() {
        let c = exec(
            "/d",
            &[("TILETUNE_DB", "/d/selector.db")],
            "/d/bin/tiletune-ab",
            &["--prompt".into(), "hi there".into()],
        );
        assert_eq!(
            c,
            "cd /d && TILETUNE_DB=/d/selector.db '/d/bin/tiletune-ab' --prompt 'hi there'"
        );
    }

    fn run(chunks: &[&[u8]]) -> (Vec<u8>, End) {
        let mut f = MarkerFilter::default();
        let mut out = Vec::new();
        for c in chunks {
            out.extend(f.feed(c));
        }
        let (rest, end) = f.finish();
        out.extend(rest);
        (out, end)
    }

    #[test]
    fn the_marker_is_cut_byte_exactly_however_it_is_split() {
        let whole = b"tokens without newline\n@@tiletune-exit 0\n";
        for split in 0..whole.len() {
            let (a, b) = whole.split_at(split);
            let (out, end) = run(&[a, b]);
            assert_eq!(out, b"tokens without newline");
            assert_eq!(end, End::Exited(0));
        }
        let (out, end) = run(&[b"line\n", b"\n@@tiletune-exit 3\n"]);
        assert_eq!((out.as_slice(), end), (&b"line\n"[..], End::Exited(3)));
    }

    #[test]
    fn no_marker_is_a_lost_connection() {
        let (out, end) = run(&[b"[1/4] gemv: 12 candidate(s)\n"]);
        assert_eq!(out, b"[1/4] gemv: 12 candidate(s)\n");
        assert_eq!(end, End::Lost);
        assert_eq!(run(&[]).1, End::Lost);
        // A marker cut short by the drop is no marker.
        assert_eq!(run(&[b"x\n@@tiletune-exit 0"]).1, End::Lost);
    }
}
