//! The nine rules of stream and event ordering (eight of CUDA's, one of NCCL's), as the
//! runtimes honour them; lessons and messages cite them by number ("rule 3").

/// Rule `n` is `RULES[n - 1]`.
pub const RULES: [&str; 9] = [
    "Operations in one stream run in issue order.",
    "Operations in different streams are unordered unless joined by an event wait.",
    "A wait applies to the most recent record of the event at the time the wait is issued; \
     waiting on an event that was never recorded completes at once.",
    "An event can be recorded only on a stream of the device where it was created (else \
     \"invalid resource handle\"); a wait may cross devices.",
    "A peer copy reads its source when it executes: before its producer finishes, it copies \
     stale data (read after write); landing while the consumer still reads the halo, it \
     corrupts it (write after read).",
    "Host synchronisation (stream or device synchronise, host barrier) is always correct and \
     always serialises: it shows as gaps in the timeline.",
    "Events carry timing only where a duration is measured; ordering-only events do not.",
    "An NCCL send or receive returns to the host at once and blocks its stream: a receive \
     ends only after its send has run, and a send may wait for its receive (NCCL buffers only \
     small ones); the calls between ncclGroupStart and ncclGroupEnd progress together.",
    "A stream memory operation works on a value, not on a last record: cuStreamWaitValue32 \
     holds its stream until the flag holds at least its value, so it may be issued before the \
     cuStreamWriteValue32 it waits for; the write comes after the work before it on its \
     stream.",
];

/// The rules `text` cites ("rule 3", "rules 1 and 5" count as 3, 1, 5), in order, once each.
pub fn cited(text: &str) -> Vec<usize> {
    let mut out = Vec::new();
    let words: Vec<&str> = text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect();
    for (i, w) in words.iter().enumerate() {
        if *w == "rule" || *w == "rules" {
            for next in &words[i + 1..] {
                match next.parse::<usize>() {
                    Ok(n) if (1..=RULES.len()).contains(&n) => {
                        if !out.contains(&n) {
                            out.push(n);
                        }
                    }
                    _ if *next == "and" => continue,
                    _ => break,
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn citations_are_found_once_each_in_order() {
        assert_eq!(
            cited("binds to none (rule 3), then rule 5; rules 1 and 2"),
            vec![3, 5, 1, 2]
        );
        assert_eq!(cited("no rules here, rule 10 neither"), Vec::<usize>::new());
        // Every broken mode's lesson names the rule it breaks.
        for m in crate::program::Mode::all()
            .iter()
            .copied()
            .filter(|m| !m.is_correct())
        {
            assert!(!cited(m.lesson()).is_empty(), "{}", m.name());
        }
    }
}
