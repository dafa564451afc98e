"""The wire codec against the golden frames in contracts/wire/, its refusals,
and round trips of values the golden frames do not hold."""

import json
import struct
import typing
import unittest
from collections.abc import Callable
from pathlib import Path
from typing import Any, Union

from shardalloc_client import peer, wire
from shardalloc_client.wire import (
    MAX_FRAME_BYTES,
    FrameError,
    GetShardHome,
    Heartbeat,
    HeartbeatAck,
    Hello,
    Leave,
    Load,
    NodeMessage,
    PlacementChanged,
    Register,
    Registered,
    RegisterWithCapacity,
    RegionMessage,
    ShardHomeEpoch,
    ShardLoad,
    Welcome,
)

WIRE = Path(__file__).resolve().parent / "../../../contracts/wire"
"""The golden frames: one ``NAME.hex`` per frame, and every frame's value in ``frames.json``."""

U64_MAX = (1 << 64) - 1

Value = Union[Hello, RegionMessage, NodeMessage, peer.PeerHello, peer.PeerMessage]


def from_json(kind: str, value: Any) -> Value:
    """Builds a frame's value from serde's JSON shape, as frames.json holds it:
    a struct is an object, a variant with fields ``{"Variant": {...}}``, a
    variant without fields ``"Variant"``."""
    if kind == "hello":
        return Hello(**value)
    if kind == "peer-hello":
        return peer.PeerHello(
            protocol=value["protocol"],
            entity_type=value["entity_type"],
            from_=value["from"],
            incarnation=value["incarnation"],
        )
    if kind == "peer":
        [(name, fields)] = value.items()
        [kind_class] = [v for v in typing.get_args(peer.PeerMessage) if v.__name__ == name]
        if "payload" in fields:
            fields = {**fields, "payload": bytes(fields["payload"])}
        peer_message: Value = kind_class(**fields)
        return peer_message
    if isinstance(value, str):
        name, fields = value, {}
    else:
        [(name, fields)] = value.items()
    variants = typing.get_args(RegionMessage if kind == "region" else NodeMessage)
    [variant] = [v for v in variants if v.__name__ == name]
    if variant is Register:
        fields = {**fields, "roles": tuple(fields["roles"])}
    if variant is Load:
        fields = {**fields, "shards": tuple(ShardLoad(**s) for s in fields["shards"])}
    if variant is RegisterWithCapacity:
        register = fields["register"]
        fields = {**fields, "register": Register(**{**register, "roles": tuple(register["roles"])})}
    message: Value = variant(**fields)
    return message


def encode(kind: str, value: Value) -> bytes:
    """Encodes a value of the given kind."""
    if kind == "hello":
        assert isinstance(value, Hello)
        return wire.encode_hello(value)
    if kind == "region":
        return wire.encode_region(value)  # type: ignore[arg-type]
    if kind == "peer-hello":
        assert isinstance(value, peer.PeerHello)
        return peer.encode_peer_hello(value)
    if kind == "peer":
        return peer.encode_peer(value)  # type: ignore[arg-type]
    return wire.encode_node(value)  # type: ignore[arg-type]


DECODERS: dict[str, Callable[[bytes], Value]] = {
    "hello": wire.decode_hello,
    "region": wire.decode_region,
    "node": wire.decode_node,
    "peer-hello": peer.decode_peer_hello,
    "peer": peer.decode_peer,
}


def golden() -> dict[str, tuple[str, Value, bytes]]:
    """Every golden frame by name: its kind, its value and its bytes."""
    frames = json.loads((WIRE / "frames.json").read_text())
    return {
        name: (entry["kind"], from_json(entry["kind"], entry["value"]), read_hex(name))
        for name, entry in frames.items()
    }


def read_hex(name: str) -> bytes:
    """A fixture's bytes (lowercase hex, 32 bytes a line)."""
    return bytes.fromhex((WIRE / f"{name}.hex").read_text())


class GoldenFrames(unittest.TestCase):
    """Each golden frame decodes to its value, and the value encodes to the frame."""

    def test_every_fixture_has_a_value_and_every_value_a_fixture(self) -> None:
        files = {path.stem for path in WIRE.glob("*.hex")}
        values = set(json.loads((WIRE / "frames.json").read_text()))
        self.assertTrue(files, f"no fixtures in {WIRE}")
        self.assertEqual(files - values, set(), "fixtures without a value in frames.json")
        self.assertEqual(values - files, set(), "values in frames.json without a fixture")

    def test_each_frame_decodes_to_its_value_and_its_value_encodes_to_it(self) -> None:
        for name, (kind, value, frame) in sorted(golden().items()):
            with self.subTest(name):
                self.assertEqual(DECODERS[kind](frame), value)
                self.assertEqual(encode(kind, value).hex(), frame.hex())

    def test_every_variant_has_a_golden_frame(self) -> None:
        found = {type(value) for _, value, _ in golden().values()}
        for union in (RegionMessage, NodeMessage, peer.PeerMessage):
            for variant in typing.get_args(union):
                with self.subTest(variant.__name__):
                    self.assertIn(variant, found)
        self.assertEqual(len(typing.get_args(RegionMessage)), 10)
        self.assertEqual(len(typing.get_args(NodeMessage)), 16)
        self.assertEqual(len(typing.get_args(peer.PeerMessage)), 8)


class Refusals(unittest.TestCase):
    """Each malformed frame and each value without a frame is a FrameError naming the problem."""

    def test_malformed_frames_are_refused(self) -> None:
        shard = b"tenant-7/order-42"
        cases: list[tuple[str, Callable[[bytes], Value], bytes, str]] = [
            ("unknown node variant", wire.decode_node, b"\x63", "unknown NodeMessage variant 99"),
            ("unknown region variant", wire.decode_region, b"\x0a", "unknown RegionMessage variant 10"),
            ("unknown peer variant", peer.decode_peer, b"\x08", "unknown PeerMessage variant 8"),
            ("payload cut short", peer.decode_peer, b"\x02\x01\x01s\x05\x01",
             "truncated frame: a byte string of 5 bytes needs 4 more"),
            ("unknown two-byte variant", wire.decode_node, b"\xc8\x01", "unknown NodeMessage variant 200"),
            ("empty frame", wire.decode_node, b"", "truncated frame: a varint needs 1 more byte"),
            ("empty Hello", wire.decode_hello, b"", "truncated frame"),
            ("string cut short", wire.decode_region, b"\x02\x0c" + shard[:9],
             "truncated frame: a string of 12 bytes needs 3 more"),
            ("varint cut short", wire.decode_node, b"\x02\x80", "truncated frame: a varint needs 1 more byte"),
            ("missing field", wire.decode_node, b"\x06\x01\x37", "truncated frame"),
            ("f64 cut short", wire.decode_region, b"\x07\xe8\x07\x00\x00\x00\x00\x00\x00",
             "truncated frame: an f64 of 8 bytes needs 3 more"),
            ("missing bool", wire.decode_region, b"\x06", "truncated frame: a bool needs 1 more byte"),
            ("missing option tag", wire.decode_node, b"\x0a\x01\x37", "truncated frame: an option tag"),
            ("more items than bytes", wire.decode_region, b"\x07\xe8\x07\x05\x01\x37",
             "truncated frame: 5 items in 2 bytes"),
            ("bad UTF-8", wire.decode_region, b"\x02\x02\xc3\x28", "invalid UTF-8 in a string"),
            ("a surrogate in UTF-8", wire.decode_node, b"\x0d\x03\xed\xa0\x80", "invalid UTF-8 in a string"),
            ("bad UTF-8 in a map key", wire.decode_region, b"\x01\x01\x01\x01\xff" + bytes(8),
             "invalid UTF-8 in a string"),
            ("bad bool", wire.decode_region, b"\x06\x07", "a bool byte must be 0 or 1, not 7"),
            ("bad option tag", wire.decode_node, b"\x0a\x01\x37\x02", "an option tag must be 0 or 1, not 2"),
            ("trailing bytes", wire.decode_region, b"\x05\x00\x00\x00", "3 bytes left after the message"),
            ("a trailing byte after a Hello", wire.decode_hello, b"\x01\x01\x61\x00",
             "1 byte left after the message"),
            ("u32 over 32 bits", wire.decode_node, b"\x00\x80\x80\x80\x80\x10", "a varint overflowing u32"),
            ("u32 over 5 bytes", wire.decode_node, b"\x00\x80\x80\x80\x80\x80\x00", "a varint longer than 5 bytes"),
            ("variant index over 32 bits", wire.decode_region, b"\xff\xff\xff\xff\x7f",
             "a varint overflowing u32"),
            ("u64 over 64 bits", wire.decode_node, b"\x04" + b"\xff" * 9 + b"\x02", "a varint overflowing u64"),
            ("u64 over 10 bytes", wire.decode_node, b"\x04" + b"\x80" * 10 + b"\x01",
             "a varint longer than 10 bytes"),
            ("string length over 64 bits", wire.decode_region, b"\x02" + b"\xff" * 10,
             "a varint longer than 10 bytes"),
            ("frame over 1 MiB", wire.decode_region, bytes(MAX_FRAME_BYTES + 1),
             f"frame of {MAX_FRAME_BYTES + 1} bytes over the 1 MiB limit"),
        ]
        for name, decode, frame, problem in cases:
            with self.subTest(name):
                with self.assertRaises(FrameError) as refused:
                    decode(frame)
                self.assertIn(problem, str(refused.exception))

    def test_values_without_a_frame_are_refused(self) -> None:
        register = Register("a", 1, (), "", {}, False, 1)
        not_a_bool = Register("a", 1, (), "", {}, 1, 1)  # type: ignore[arg-type]
        cases: list[tuple[str, Callable[[], bytes], str]] = [
            ("negative u32", lambda: wire.encode_hello(Hello(-1, "cart")), "out of range for a u32"),
            ("u32 over its limit", lambda: wire.encode_node(Welcome(1 << 32)), "out of range for a u32"),
            ("u32 over its limit in a Hello", lambda: wire.encode_hello(Hello(1 << 32, "cart")),
             "Hello.protocol of 4294967296 is out of range for a u32"),
            ("negative u64", lambda: wire.encode_node(ShardHomeEpoch("7", "b", -1)), "out of range for a u64"),
            ("u64 over its limit", lambda: wire.encode_node(Registered(U64_MAX + 1, 1, 1, 1)),
             "out of range for a u64"),
            ("an int that is not one", lambda: wire.encode_node(Welcome(1.0)),  # type: ignore[arg-type]
             "Welcome.protocol must be an int"),
            ("a bool that is not one", lambda: wire.encode_region(not_a_bool), "Register.proxy_only must be a bool"),
            ("a lone surrogate", lambda: wire.encode_region(GetShardHome("\ud800")), "invalid UTF-8 in a string"),
            ("a lone surrogate in a key", lambda: wire.encode_region(Heartbeat(1, {"\udfff": 1.0})),
             "invalid UTF-8 in a string"),
            ("frame over 1 MiB", lambda: wire.encode_region(GetShardHome("x" * MAX_FRAME_BYTES)),
             "over the 1 MiB limit"),
            ("a node message as a region's", lambda: wire.encode_region(Welcome(1)),  # type: ignore[arg-type]
             "Welcome is not a RegionMessage"),
            ("a region message as the node's", lambda: wire.encode_node(register),  # type: ignore[arg-type]
             "Register is not a NodeMessage"),
        ]
        for name, encode_it, problem in cases:
            with self.subTest(name):
                with self.assertRaises(FrameError) as refused:
                    encode_it()
                self.assertIn(problem, str(refused.exception))


class RoundTrips(unittest.TestCase):
    """Values the golden frames do not hold: empty strings, zeros, the
    largest numbers, non-ASCII text."""

    def test_values_round_trip(self) -> None:
        region: list[RegionMessage] = [
            Register("", 0, (), "", {}, False, 0),
            Register(
                "region-ü", U64_MAX, ("", "rôle"), "1.0-β", {"": "", "zone": "eu-ö", "日本": "東京"}, True, U64_MAX
            ),
            Heartbeat(0, {}),
            Heartbeat(U64_MAX, {"cpu": 0.0, "mem": -0.5, "big": 1e308, "tiny": 5e-324}),
            GetShardHome(""),
            GetShardHome("tenant/ü 7 🚀"),
            Load(0, (), 0.0),
            Load(U64_MAX, (ShardLoad("", 0.0), ShardLoad("ß", 1.5)), float("inf")),
        ]
        node: list[NodeMessage] = [
            Welcome(0),
            Welcome((1 << 32) - 1),
            Registered(0, 0, 0, 0),
            Registered(U64_MAX, U64_MAX, U64_MAX, U64_MAX),
            HeartbeatAck(0, 0, 0),
            HeartbeatAck(U64_MAX, U64_MAX, U64_MAX),
            PlacementChanged("", ""),
            PlacementChanged("ü", None),
            ShardHomeEpoch("", "", 0),
            ShardHomeEpoch("日本", "région", U64_MAX),
        ]
        hellos = [Hello(0, ""), Hello((1 << 32) - 1, "ünïcode")]
        for message in region:
            with self.subTest(message):
                self.assertEqual(wire.decode_region(wire.encode_region(message)), message)
        for reply in node:
            with self.subTest(reply):
                self.assertEqual(wire.decode_node(wire.encode_node(reply)), reply)
        for hello in hellos:
            with self.subTest(hello):
                self.assertEqual(wire.decode_hello(wire.encode_hello(hello)), hello)

    def test_the_largest_numbers_take_their_longest_forms(self) -> None:
        self.assertEqual(
            wire.encode_node(Registered(U64_MAX, 0, 1, 0)), b"\x02" + b"\xff" * 9 + b"\x01" + b"\x00\x01\x00"
        )
        self.assertEqual(wire.encode_node(Welcome((1 << 32) - 1)), b"\x00\xff\xff\xff\xff\x0f")

    def test_maps_are_written_in_key_order(self) -> None:
        # By the keys' UTF-8 bytes, as Rust's BTreeMap: "Z" < "dc" < "zone" < "é".
        labels = {"zone": "eu", "é": "1", "dc": "fra1", "Z": "2"}
        frame = wire.encode_region(Register("a", 1, (), "", labels, False, 1))
        decoded = wire.decode_region(frame)
        assert isinstance(decoded, Register)
        self.assertEqual(list(decoded.labels), ["Z", "dc", "zone", "é"])
        reordered = dict(sorted(labels.items()))
        self.assertEqual(wire.encode_region(Register("a", 1, (), "", reordered, False, 1)), frame)

    def test_a_repeated_map_key_keeps_the_last_value(self) -> None:
        # Heartbeat{sequence: 1, metrics: {"a": 1.0, "a": 2.0}}
        frame = b"\x01\x01\x02" + b"\x01a" + struct.pack("<d", 1.0) + b"\x01a" + struct.pack("<d", 2.0)
        self.assertEqual(wire.decode_region(frame), Heartbeat(1, {"a": 2.0}))

    def test_a_longer_varint_than_needed_reads_as_postcard_reads_it(self) -> None:
        # The node (postcard) reads a varint padded with a zero group; so does this codec.
        self.assertEqual(wire.decode_node(b"\x00\x81\x00"), Welcome(1))

    def test_a_frame_of_exactly_1_mib_is_accepted(self) -> None:
        shard = "x" * (MAX_FRAME_BYTES - 4)  # 1 index byte, 3 length bytes
        frame = wire.encode_region(GetShardHome(shard))
        self.assertEqual(len(frame), MAX_FRAME_BYTES)
        self.assertEqual(wire.decode_region(frame), GetShardHome(shard))

    def test_the_byte_examples_of_the_protocol_document(self) -> None:
        # docs/protocol.md, "Byte examples": the ones proto/src/protocol.rs pins.
        self.assertEqual(wire.encode_hello(Hello(1, "cart")).hex(), "010463617274")
        self.assertEqual(wire.encode_region(GetShardHome("7")).hex(), "020137")
        self.assertEqual(wire.encode_region(Leave()).hex(), "05")
        self.assertEqual(
            wire.encode_region(Load(1000, (ShardLoad("7", 2.0),), 0.0)).hex(),
            "07e80701013700000000000000400000000000000000",
        )
        self.assertEqual(wire.encode_node(PlacementChanged("7", None)).hex(), "0a013700")
        self.assertEqual(wire.encode_node(ShardHomeEpoch("7", "b", 300)).hex(), "0e01370162ac02")


if __name__ == "__main__":
    unittest.main()
