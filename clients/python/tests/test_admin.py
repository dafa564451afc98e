"""The admin client without a node: its URLs, its refusals of a bad base
URL, and its HTTP against a tiny asyncio server (a body by length,
chunked, or to the end; an error body; an event stream hung up)."""

import asyncio
import unittest
from collections.abc import Awaitable, Callable

from shardalloc_client.admin import AdminClient, AdminError
from shardalloc_client.admin_types import Placement, Placements

Handler = Callable[[bytes], Awaitable[bytes]]


class UrlTests(unittest.TestCase):
    def test_percent_encodes_each_segment_under_the_base_path(self) -> None:
        admin = AdminClient("http://h:1/prefix/")
        self.assertEqual(
            admin.url(["v1", "cluster", "shards", "cart", "shards", "a/b c?#%"], {"after": "x y",
                                                                                   "limit": None}),
            "http://h:1/prefix/v1/cluster/shards/cart/shards/a%2Fb%20c%3F%23%25?after=x+y",
        )

    def test_refuses_a_bad_base_url_by_name(self) -> None:
        cases = [
            ("ftp://x", r'invalid admin base URL "ftp://x": scheme ftp: is not http or https'),
            ("", r'invalid admin base URL "": not a URL'),
            ("http://", r"not a URL"),
            ("http://h:port", r"not a URL"),
            ("http://h/#top", r"it must be a plain http\(s\)://host\[:port\]\[/path\] URL"),
            ("http://u:p@h/", r"it must be a plain"),
        ]
        for url, message in cases:
            with self.subTest(url=url), self.assertRaisesRegex(AdminError, message):
                AdminClient(url)


class HttpTests(unittest.IsolatedAsyncioTestCase):
    async def serve(self, handler: Handler) -> str:
        async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            body = await reader.readexactly(length)
            try:
                writer.write(await handler(head + body))
                await writer.drain()
            finally:
                writer.close()

        server = await asyncio.start_server(answer, "127.0.0.1", 0)
        self.addAsyncCleanup(server.wait_closed)
        self.addCleanup(server.close)
        port = server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    async def test_reads_bodies_by_length_chunked_and_to_the_end(self) -> None:
        requests: list[bytes] = []
        answers = [
            b'HTTP/1.1 200 OK\r\ncontent-length: 31\r\n\r\n{"placements":[],"next":"abc"}\n',
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
            + b"".join(b"%x;ext=1\r\n%s\r\n" % (len(piece), piece)
                       for piece in [b'{"pla', b'cements":[{"shar', b'dId":"7","target":"r"}]}'])
            + b"0\r\ntrailer: x\r\n\r\n",
        ]

        async def handler(request: bytes) -> bytes:
            requests.append(request)
            return answers.pop(0)

        admin = AdminClient(await self.serve(handler), "tok")
        everything = await admin.placements("a b")
        self.assertEqual(everything, Placements([Placement("7", "r")], None))
        self.assertTrue(requests[0].startswith(b"GET /v1/cluster/shards/a%20b/placements HTTP/1.1\r\n"))
        self.assertIn(b"Authorization: Bearer tok\r\n", requests[0])
        self.assertTrue(requests[1].startswith(b"GET /v1/cluster/shards/a%20b/placements?after=abc "))

    async def test_an_error_body_becomes_the_nodes_code_and_sentence(self) -> None:
        async def handler(request: bytes) -> bytes:
            if request.startswith(b"DELETE"):
                body = b'{"error":{"code":"not-found","message":"no placement"}}'
            else:
                body = b"plain text"
            return (b"HTTP/1.1 404 Not Found\r\ncontent-length: " + str(len(body)).encode()
                    + b"\r\nconnection: close\r\n\r\n" + body)

        admin = AdminClient(await self.serve(handler))
        self.assertFalse(await admin.remove_placement("cart", "7"))
        with self.assertRaises(AdminError) as raised:
            await admin.shard("cart", "7")
        self.assertEqual((raised.exception.status, raised.exception.code), (404, None))
        self.assertRegex(str(raised.exception), r"answered 404 to http://.*/shards/7 without an error body: plain text")

    async def test_an_event_stream_to_the_end_and_one_hung_up(self) -> None:
        async def handler(request: bytes) -> bytes:
            self.assertIn(b"Last-Event-ID: 1-1\r\n", request)
            return (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n: live\n\n"
                    b'id: 1-2\ndata: {"seq":2,"kind":"placement-set","atMs":1,"type":"cart"}\n\n')

        admin = AdminClient(await self.serve(handler))
        stream = await admin.events("cart", "1-1")
        got = [(id, event.kind) async for id, event in stream]
        self.assertEqual(got, [("1-2", "placement-set")])
        self.assertTrue(stream.closed)

        # A stream closed while another task waits on it ends that iteration.
        server_done = asyncio.Event()

        async def quiet(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n9\r\n: live\n\n\r\n")
            await writer.drain()
            await server_done.wait()
            writer.close()

        server = await asyncio.start_server(quiet, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        stream = await AdminClient(f"http://127.0.0.1:{port}").events()
        waiting = asyncio.create_task(anext(stream, None))
        await asyncio.sleep(0.05)
        stream.close()
        self.assertIsNone(await asyncio.wait_for(waiting, 5))
        server_done.set()
        server.close()
        await server.wait_closed()

    async def test_a_request_that_got_no_answer_names_the_url(self) -> None:
        async def handler(request: bytes) -> bytes:
            return b""

        base = await self.serve(handler)
        with self.assertRaisesRegex(
            AdminError, rf"request to {base}/v1/cluster/regions failed: the node closed the connection"
        ):
            await AdminClient(base).regions()


if __name__ == "__main__":
    unittest.main()
