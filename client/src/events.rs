//! Reading the decision event stream (`GET /v1/events`): [`EventStream`],
//! opened by [`AdminClient::events`](crate::admin::AdminClient::events),
//! and [`SseParser`], the Server-Sent Events framing it reads with (lines
//! of `id:` and `data:`, an event at each blank line, comments ignored).

use reqwest::header::AUTHORIZATION;

use crate::admin::{AdminClient, AdminError, certificate_problem, error_from};
use crate::api::DecisionEvent;

/// Most bytes one event may take before the stream is refused as broken.
pub const MAX_EVENT_BYTES: usize = 1 << 20;

/// One event as the stream framed it.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamedEvent {
    /// Its `id:` (`<term>-<seq>`), `None` for a `missed` event.
    pub id: Option<String>,
    /// Its `data:`, decoded.
    pub event: DecisionEvent,
}

/// The SSE framing: feed it bytes as they come, take whole events out.
#[derive(Debug, Default)]
pub struct SseParser {
    buffer: Vec<u8>,
    id: Option<String>,
    data: Option<String>,
}

impl SseParser {
    /// Adds `bytes` and returns the events they complete, in order: each
    /// an event's `id` and `data` text. Fails when one line grows past
    /// [`MAX_EVENT_BYTES`] or is not UTF-8.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<Vec<(Option<String>, String)>, String> {
        self.buffer.extend_from_slice(bytes);
        let mut events = Vec::new();
        while let Some(end) = self.buffer.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.buffer.drain(..=end).collect();
            let line = std::str::from_utf8(&line).map_err(|_| "the stream sent a line that is not UTF-8".to_owned())?;
            let line = line.trim_end_matches('\n').trim_end_matches('\r');
            if line.is_empty() {
                if let Some(data) = self.data.take() {
                    events.push((self.id.take(), data));
                }
                self.id = None;
                continue;
            }
            if line.starts_with(':') {
                continue;
            }
            let (field, value) = line.split_once(':').unwrap_or((line, ""));
            let value = value.strip_prefix(' ').unwrap_or(value);
            match field {
                "id" => self.id = Some(value.to_owned()),
                "data" => match &mut self.data {
                    Some(data) => {
                        data.push('\n');
                        data.push_str(value);
                    }
                    None => self.data = Some(value.to_owned()),
                },
                _ => {}
            }
        }
        let pending = self.buffer.len() + self.data.as_ref().map_or(0, String::len);
        if pending > MAX_EVENT_BYTES {
            return Err(format!("the stream sent an event of more than {MAX_EVENT_BYTES} bytes"));
        }
        Ok(events)
    }
}

impl AdminClient {
    /// `GET /v1/events`: the decision event stream, of one type or all,
    /// from the next event, or after `last_event_id` (`<term>-<seq>`).
    pub async fn events(
        &self,
        entity_type: Option<&str>,
        last_event_id: Option<&str>,
    ) -> Result<EventStream, AdminError> {
        let mut url = self.url(&["v1", "events"]);
        if let Some(entity_type) = entity_type {
            url.query_pairs_mut().append_pair("type", entity_type);
        }
        let mut request = self.http.get(url.clone()).header(reqwest::header::ACCEPT, "text/event-stream");
        if let Some(token) = &self.token {
            request = request.header(AUTHORIZATION, format!("Bearer {token}"));
        }
        if let Some(id) = last_event_id {
            request = request.header("last-event-id", id);
        }
        let http_error = |source: reqwest::Error| match certificate_problem(&source) {
            Some(detail) => AdminError::UntrustedCertificate { url: url.to_string(), detail },
            None => AdminError::Http { url: url.to_string(), source },
        };
        let response = request.send().await.map_err(http_error)?;
        let status = response.status();
        if !status.is_success() {
            let bytes = response.bytes().await.map_err(http_error)?;
            return Err(error_from(&url, status, &bytes));
        }
        Ok(EventStream { url: url.to_string(), response, parser: Default::default(), ready: Default::default() })
    }
}

/// An open event stream.
#[derive(Debug)]
pub struct EventStream {
    pub(crate) url: String,
    pub(crate) response: reqwest::Response,
    pub(crate) parser: SseParser,
    pub(crate) ready: std::collections::VecDeque<StreamedEvent>,
}

impl EventStream {
    /// The next event; `Ok(None)` when the node ended the stream (it shut
    /// down or stopped leading: reconnect with the last id).
    pub async fn next(&mut self) -> Result<Option<StreamedEvent>, AdminError> {
        loop {
            if let Some(event) = self.ready.pop_front() {
                return Ok(Some(event));
            }
            let chunk =
                self.response.chunk().await.map_err(|source| AdminError::Http { url: self.url.clone(), source })?;
            let Some(chunk) = chunk else { return Ok(None) };
            let decode = |reason: String| AdminError::Decode { url: self.url.clone(), reason };
            for (id, data) in self.parser.feed(&chunk).map_err(decode)? {
                let event = serde_json::from_str(&data).map_err(|e| decode(format!("event {data}: {e}")))?;
                self.ready.push_back(StreamedEvent { id, event });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_framed_by_blank_lines_across_chunks() {
        let mut parser = SseParser::default();
        assert_eq!(parser.feed(b": keep-alive\n\nid: 1-1\nda").unwrap(), vec![]);
        let events = parser.feed(b"ta: {\"a\":1}\n\ndata: x\r\ndata: y\n\n").unwrap();
        assert_eq!(events, vec![(Some("1-1".into()), "{\"a\":1}".into()), (None, "x\ny".into())]);
    }

    #[test]
    fn an_endless_line_is_refused() {
        let mut parser = SseParser::default();
        let long = vec![b'x'; MAX_EVENT_BYTES + 1];
        assert!(parser.feed(&long).unwrap_err().contains("more than"));
    }
}
