"""Writes tests/rest_contract_generated.py: every REST body of the node's
contract (contracts/rest/, written by the node from its OpenAPI schemas,
every field filled) that this client has a TypedDict of the same name for,
as a literal of that type. ``mypy --strict`` then fails when the node has a
key the client does not declare, or the client requires one the node does
not send: the client's hand-written types cannot drift from the node's
unseen. Run before mypy (``cargo xtask clients``)."""

import json
import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
CONTRACTS = HERE.parent.parent.parent / "contracts" / "rest"
TYPES = (HERE.parent / "src" / "shardalloc_client" / "admin_types.py").read_text()
DECLARED = set(re.findall(r"^class (\w+)\(TypedDict", TYPES, re.MULTILINE))


def main() -> None:
    checked: list[tuple[str, str, object]] = []
    for path in sorted(CONTRACTS.glob("*.json")):
        name = path.name.split(".")[0]
        if name not in DECLARED:
            continue
        body = json.loads(path.read_text())
        if not isinstance(body, dict):
            continue
        constant = "NODE_" + re.sub(r"\W", "_", path.name.removesuffix(".json")).upper()
        checked.append((name, constant, body))
    if not checked:
        raise SystemExit(f"no body of {CONTRACTS} has a TypedDict in admin_types.py: the check would prove nothing")
    names = sorted({name for name, _, _ in checked})
    lines = [
        '"""Written by scripts/rest_contract.py from contracts/rest/ (do not edit): each',
        "node body as a literal of this client's TypedDict of the same name.\"\"\"",
        "",
        f"from shardalloc_client.admin_types import {', '.join(names)}",
        "",
    ]
    for name, constant, body in checked:
        lines.append(f"{constant}: {name} = {body!r}")
    lines.append("")
    (HERE.parent / "tests" / "rest_contract_generated.py").write_text("\n".join(lines))
    print(f"rest-contract: {len(checked)} bodies checked against {len(names)} types")


if __name__ == "__main__":
    main()
