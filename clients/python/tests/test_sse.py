"""The event stream's framing, fed in pieces as a socket delivers them
(the TypeScript client's ``test/sse.test.ts``)."""

import unittest

from shardalloc_client.sse import MAX_EVENT_BYTES, SseError, SseEvent, SseParser


class SseParserTests(unittest.TestCase):
    def test_frames_events_at_blank_lines_with_their_ids_across_any_split(self) -> None:
        text = (
            ": live\n\nid: 1-1\ndata: {\"a\":1}\n\n: keep-alive\nid: 1-2\r\ndata: x\n"
            "data: y\r\n\r\ndata:no-space\n\n"
        ).encode()
        want = [SseEvent("1-1", '{"a":1}'), SseEvent("1-2", "x\ny"), SseEvent(None, "no-space")]
        for split in range(len(text) + 1):
            with self.subTest(split=split):
                parser = SseParser()
                got = parser.feed(text[:split]) + parser.feed(text[split:])
                self.assertEqual(got, want)

    def test_an_id_without_data_makes_no_event_and_does_not_stick_to_the_next(self) -> None:
        self.assertEqual(SseParser().feed(b"id: 9-9\n\ndata: z\n\n"), [SseEvent(None, "z")])

    def test_refuses_a_line_past_the_limit_and_one_that_is_not_utf8_by_name(self) -> None:
        with self.assertRaisesRegex(SseError, r"longer than 1048576 bytes"):
            SseParser().feed(b"a" * (MAX_EVENT_BYTES + 1))
        with self.assertRaisesRegex(SseError, r"not UTF-8"):
            SseParser().feed(bytes([0x64, 0xFF, 0x0A]))
        # Multi-byte characters split across feeds are whole lines again.
        parser = SseParser()
        data = "data: é\n\n".encode()
        self.assertEqual(parser.feed(data[:7]) + parser.feed(data[7:]), [SseEvent(None, "é")])


if __name__ == "__main__":
    unittest.main()
