"""ClusterInfo: the one Python object behind the MBean, for the JVM bridge and Jolokia.

Every method is a coroutine run on the master's asyncio loop, where the cluster lives;
the bridge hands calls from RMI threads over with ``run_coroutine_threadsafe``
(docs/design/dependencies.md#jpype1-the-jmx-bridge). Errors are
``ManagementError``s naming the Java exception a client sees (the control plane's
refusals are translated here, master_service/control.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from master_service.control import Control
from master_service.jmx.attributes import (
    ATTRIBUTES,
    ATTRIBUTES_BY_NAME,
    OPERATIONS_BY_NAME,
    Attribute,
    AttributeNotFound,
    InvalidArgument,
    InvalidAttributeValue,
    Operation,
    OperationNotFound,
    ReadOnlyAttribute,
    coerce,
    object_name,
    refusal_as_management,
)


class ClusterInfo:
    """The MBean over the master's control plane (its configuration, cluster, peering)."""

    def __init__(self, control: Control) -> None:
        self.control = control

    @property
    def object_name(self) -> str:
        return object_name(self.control.config.node_id)

    # ---- lookups (no loop needed: the table is constant) ----

    def attribute(self, name: str) -> Attribute:
        attribute = ATTRIBUTES_BY_NAME.get(name)
        if attribute is None:
            raise AttributeNotFound(f"no attribute '{name}' in {self.object_name}")
        return attribute

    def operation(self, name: str, signature: Sequence[str] | None = None) -> Operation:
        op = OPERATIONS_BY_NAME.get(name)
        if op is None:
            raise OperationNotFound(f"no operation '{name}' in {self.object_name}; "
                                    f"operations: {', '.join(OPERATIONS_BY_NAME)}")
        if signature is not None and tuple(signature) != op.signature():
            raise OperationNotFound(
                f"no operation {name}({', '.join(signature)}) in {self.object_name}; "
                f"it is {name}({', '.join(op.signature())})")
        return op

    # ---- calls, on the loop ----

    async def read(self, name: str) -> Any:
        return self.attribute(name).get(self.control)

    async def read_many(self, names: Sequence[str] | None = None) -> dict[str, Any]:
        return {n: await self.read(n) for n in (names or [a.name for a in ATTRIBUTES])}

    async def write(self, name: str, value: Any) -> Any:
        """Set an attribute; returns its previous value (Jolokia's write answer)."""
        attribute = self.attribute(name)
        if attribute.set is None:
            raise ReadOnlyAttribute(f"attribute {name} is read-only"
                                    + (": set node-id in cluster.properties and restart"
                                       if name == "NodeID" else ""))
        try:
            typed = coerce(attribute.java_type, value)
        except ValueError as exc:
            raise InvalidAttributeValue(f"{name}: {exc}; nothing changed") from None
        old = attribute.get(self.control)
        with refusal_as_management(InvalidAttributeValue):
            await attribute.set(self.control, typed)
        return old

    async def invoke(self, name: str, args: Sequence[Any],
                     signature: Sequence[str] | None = None) -> Any:
        op = self.operation(name, signature)
        if len(args) != len(op.params):
            raise InvalidArgument(
                f"{name} takes {len(op.params)} arguments "
                f"({', '.join(p.name for p in op.params)}), got {len(args)}")
        typed = []
        for param, value in zip(op.params, args, strict=True):
            try:
                typed.append(coerce(param.java_type, value))
            except ValueError as exc:
                raise InvalidArgument(f"{name}: argument {param.name}: {exc}") from None
        with refusal_as_management():
            return await op.run(self.control, *typed)
