//! Stop strings: find the earliest match, and hold back any suffix that could still become
//! one, so a stop string never leaks to a streaming client.
pub struct StopChecker {
    stops: Vec<String>,
    include: bool,
    text: String,
    emitted: usize,
}

pub enum StopOutcome {
    /// Text safe to emit now.
    Continue(String),
    /// A stop string matched: final text to emit and the matched string.
    Stopped(String, String),
}

impl StopChecker {
    pub fn new(stops: Vec<String>, include_stop_str_in_output: bool) -> Self {
        let stops = stops.into_iter().filter(|s| !s.is_empty()).collect();
        StopChecker {
            stops,
            include: include_stop_str_in_output,
            text: String::new(),
            emitted: 0,
        }
    }

    pub fn push(&mut self, delta: &str) -> StopOutcome {
        if self.stops.is_empty() {
            return StopOutcome::Continue(delta.to_string());
        }
        self.text.push_str(delta);
        // A match cannot start before `emitted`: its start would have been held back.
        let pending = &self.text[self.emitted..];
        let hit = self
            .stops
            .iter()
            .filter_map(|s| pending.find(s.as_str()).map(|p| (p, s)))
            .min_by_key(|(p, s)| (*p, std::cmp::Reverse(s.len())));
        if let Some((p, s)) = hit {
            let end = if self.include { p + s.len() } else { p };
            let out = pending[..end].to_string();
            let s = s.clone();
            self.emitted = self.text.len();
            return StopOutcome::Stopped(out, s);
        }
        let hold = self.partial_suffix_len(pending);
        let out = pending[..pending.len() - hold].to_string();
        self.emitted += out.len();
        StopOutcome::Continue(out)
    }

    /// Length of the longest suffix of `pending` that is a proper prefix of a stop string.
    fn partial_suffix_len(&self, pending: &str) -> usize {
        pending
            .char_indices()
            .map(|(i, _)| i)
            .find(|&i| {
                let suffix = &pending[i..];
                self.stops
                    .iter()
                    .any(|s| s.len() > suffix.len() && s.starts_with(suffix))
            })
            .map_or(0, |i| pending.len() - i)
    }

    /// Releases held-back text when the sequence ends for another reason.
    pub fn flush(&mut self) -> String {
        let out = self.text[self.emitted..].to_string();
        self.emitted = self.text.len();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stops: &[&str], include: bool, deltas: &[&str]) -> (Vec<String>, Option<String>) {
        let mut c = StopChecker::new(stops.iter().map(|s| s.to_string()).collect(), include);
        let mut out = vec![];
        for d in deltas {
            match c.push(d) {
                StopOutcome::Continue(t) => out.push(t),
                StopOutcome::Stopped(t, s) => {
                    out.push(t);
                    return (out, Some(s));
                }
            }
        }
        out.push(c.flush());
        (out, None)
    }

    #[test]
    fn holds_back_partial_and_strips() {
        let (out, s) = run(&["STOP"], false, &["Hello S", "T", "OP and more"]);
        assert_eq!(out, vec!["Hello ", "", ""]);
        assert_eq!(s.as_deref(), Some("STOP"));
    }

    #[test]
    fn include_stop_and_false_alarm() {
        let (out, s) = run(&["STOP"], true, &["a ST", "x b", "cSTOPd"]);
        assert_eq!(out, vec!["a ", "STx b", "cSTOP"]);
        assert_eq!(s.as_deref(), Some("STOP"));
        let (out, s) = run(&["\n\n"], false, &["a\n", "b"]);
        assert_eq!(out.concat(), "a\nb");
        assert!(s.is_none());
    }

    #[test]
    fn earliest_of_many_and_unicode() {
        let (out, s) = run(&["世界", "b"], false, &["你好世", "界 b"]);
        assert_eq!(out.concat(), "你好");
        assert_eq!(s.as_deref(), Some("世界"));
    }
}
