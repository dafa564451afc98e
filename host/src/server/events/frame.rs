//! The bytes of the event stream: each event's SSE frame (`id:` and one
//! `data:` line of JSON), made once, by the first stream that sends the
//! event, and kept beside it in the hub, so a replay to many streams
//! copies bytes instead of serialising every event once per stream; and
//! the few frames made per stream (`missed`, the `: live` and keep-alive
//! comments).

use bytes::Bytes;
use shardalloc_proto::api::{DecisionEvent, EventKind};

/// The frame of `event`, numbered in `term`: `id: <term>-<seq>` and its
/// JSON on one `data:` line (JSON escapes every line break).
pub fn event(term: u64, event: &DecisionEvent) -> Bytes {
    let data = serde_json::to_string(event).expect("an event serializes");
    let mut frame = String::with_capacity(data.len() + 32);
    use std::fmt::Write as _;
    let _ = write!(frame, "id: {term}-{}\ndata: {data}\n\n", event.seq);
    Bytes::from(frame)
}

/// The frame telling a stream that `missed` events are lost to it (no id:
/// it is no event of the term).
pub fn missed(missed: u64) -> Bytes {
    let event = DecisionEvent { missed: Some(missed), ..DecisionEvent::new(EventKind::Missed, "", 0) };
    let data = serde_json::to_string(&event).expect("an event serializes");
    Bytes::from(format!("data: {data}\n\n"))
}

/// A comment frame, `: <text>` (no line breaks in `text`).
pub fn comment(text: &str) -> Bytes {
    debug_assert!(!text.contains(['\n', '\r']), "a comment is one line");
    Bytes::from(format!(": {text}\n\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_sse_events_with_one_data_line() {
        let mut homed = DecisionEvent::new(EventKind::ShardHomed, "cart", 7);
        homed.seq = 42;
        homed.detail = Some("two\nlines".into());
        let frame = event(3, &homed);
        let text = std::str::from_utf8(&frame).unwrap();
        let (head, data) = text.strip_suffix("\n\n").unwrap().split_once('\n').unwrap();
        assert_eq!(head, "id: 3-42");
        let data = data.strip_prefix("data: ").expect("a data line");
        assert!(!data.contains('\n'), "{text:?}");
        assert_eq!(serde_json::from_str::<DecisionEvent>(data).unwrap(), homed);
        let missed = missed(5);
        let data = std::str::from_utf8(&missed).unwrap().strip_prefix("data: ").unwrap().strip_suffix("\n\n").unwrap();
        let missed: DecisionEvent = serde_json::from_str(data).unwrap();
        assert_eq!((missed.kind, missed.missed), (EventKind::Missed, Some(5)));
        assert_eq!(&comment("live")[..], b": live\n\n");
    }
}
