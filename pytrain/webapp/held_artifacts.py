"""The session's artifacts by role ("training", "eval", "optimizer", "checkpoint", a backbone's bytes), holding
each frozen weight once: the training and eval models of artifacts pytrain made are not kept as bytes beside the
:class:`~pytrain.device.api.Module` that runs them (for GPT-2 small under LoRA that was ~950 MiB more than the Module's
789) but serialized again from the Module's own models when asked (a saved run, a run file): pytrain's models
read and serialized again are the very bytes read, so what is saved is what was made. Artifacts uploaded as they
are (ORT's, whose models the Module converts) keep their bytes."""
from __future__ import annotations

from typing import Any, Dict, Iterator, Mapping, MutableMapping, Optional

#: the roles a Module's models can give back (:attr:`pytrain.device.module.Module.models`)
MODEL_ROLES = ("training", "eval")


class Artifacts(MutableMapping):
    """Artifacts by role: bytes, or for the roles in ``models`` ({role: ModelProto}) the model's serialization,
    made when asked (each time: the caller holds the bytes only as long as it needs them)."""

    def __init__(self, arts: Mapping[str, Any], models: Optional[Mapping[str, Any]] = None) -> None:
        self.models: Dict[str, Any] = {}
        self._bytes: Dict[str, bytes] = {}
        self._order = list(arts)
        for role in self._order:
            if isinstance(arts, Artifacts) and role in arts.models:   # a copy: no model is serialized to make it
                self.models[role] = arts.models[role]
            else:
                self._bytes[role] = bytes(arts[role])
        for role, model in (models or {}).items():
            if role in MODEL_ROLES and role in self._order:
                self.models[role] = model
                self._bytes.pop(role, None)

    def __getitem__(self, role: str) -> bytes:
        if role in self.models:
            return self.models[role].SerializeToString()
        return self._bytes[role]

    def __setitem__(self, role: str, value: bytes) -> None:
        self.models.pop(role, None)
        self._bytes[role] = bytes(value)
        if role not in self._order:
            self._order.append(role)

    def __delitem__(self, role: str) -> None:
        if role not in self._order:
            raise KeyError(role)
        self.models.pop(role, None)
        self._bytes.pop(role, None)
        self._order.remove(role)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._order))

    def __len__(self) -> int:
        return len(self._order)

    def copy(self) -> "Artifacts":
        return Artifacts(self)

    def held_bytes(self) -> int:
        """The bytes kept as bytes (not those a Module's models give back when asked)."""
        return sum(len(v) for v in self._bytes.values())
