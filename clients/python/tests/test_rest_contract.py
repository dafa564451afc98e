"""The REST bodies' dataclasses against the node's contract: every body of
``contracts/rest/`` (written by the node from its OpenAPI schemas, every
field filled) that :mod:`shardalloc_client.admin_types` has a class of the
same name for is read strictly as that class and written back. A key the
node sends that the class lacks, a field the class requires that the node
does not send, or a value of another type fails here, so the client's
hand-written types cannot drift from the node's unseen."""

import dataclasses
import json
import unittest
from pathlib import Path
from typing import Any

from shardalloc_client import admin_types
from shardalloc_client._json import JsonError, from_json, to_json

CONTRACTS = Path(__file__).resolve().parents[3] / "contracts" / "rest"


def _without_nulls(value: Any) -> Any:
    """A body as :func:`to_json` writes it: no ``null`` members."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def _bodies() -> list[tuple[Path, type[Any]]]:
    classes: dict[str, type[Any]] = {}
    for name in admin_types.__all__:
        kind = getattr(admin_types, name)
        if isinstance(kind, type) and dataclasses.is_dataclass(kind):
            classes[name] = kind
    found = []
    for path in sorted(CONTRACTS.glob("*.json")):
        kind = classes.get(path.name.split(".")[0])
        if kind is not None:
            found.append((path, kind))
    return found


class RestContractTests(unittest.TestCase):
    def test_every_golden_body_reads_strictly_as_its_class_and_writes_back(self) -> None:
        bodies = _bodies()
        self.assertGreaterEqual(len(bodies), 15, f"too few bodies of {CONTRACTS} matched a class")
        for path, kind in bodies:
            with self.subTest(body=path.name):
                body = json.loads(path.read_text())
                value = from_json(kind, body, strict=True)
                self.assertIsInstance(value, kind)
                self.assertEqual(to_json(value), _without_nulls(body))

    def test_a_key_the_class_lacks_or_a_missing_field_fails_naming_it(self) -> None:
        body = json.loads((CONTRACTS / "ShardState.json").read_text())
        with self.assertRaisesRegex(JsonError, "the node sends shardColor, which ShardState lacks"):
            from_json(admin_types.ShardState, {**body, "shardColor": "red"}, strict=True)
        # Read leniently (as answers are), a newer node's key is skipped.
        lenient = from_json(admin_types.ShardState, {**body, "shardColor": "red"})
        self.assertEqual(lenient.shard_id, body["shardId"])
        del body["movedMs"]
        with self.assertRaisesRegex(JsonError, "ShardState: movedMs is missing"):
            from_json(admin_types.ShardState, body, strict=True)
        self.assertIsNone(from_json(admin_types.ShardState, body).moved_ms, "absent reads as None")
        del body["moving"]
        with self.assertRaisesRegex(JsonError, "ShardState: moving is missing"):
            from_json(admin_types.ShardState, body)
        with self.assertRaisesRegex(JsonError, r"StrategyState\.active\.atMs: expected int, got str"):
            active = {"name": "a", "version": "1", "cause": "initial", "atMs": "soon"}
            from_json(admin_types.StrategyState, {"active": active, "history": []})


if __name__ == "__main__":
    unittest.main()
