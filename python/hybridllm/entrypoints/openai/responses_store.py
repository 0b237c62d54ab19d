"""The frontend's store of /v1/responses objects (response_store.rs): a bounded LRU map from
response id to what GET /v1/responses/{id}, its input items and previous_response_id need.
Each frontend has its own."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any


@dataclass
class StoredResponse:
    owner: str | None  # the API key that created it (None without --api-key): only it sees it
    response: dict[str, Any]  # the response object as it was returned
    input_items: list[dict[str, Any]]  # this request's input items, with their ids
    conversation: list[dict[str, Any]]  # chat messages: earlier turns, this input and output


class ResponseStore:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._map: OrderedDict[str, StoredResponse] = OrderedDict()

    def put(self, rid: str, r: StoredResponse) -> None:
        """Stores it, dropping the least recently used entry when full (0: stores nothing)."""
        if self.capacity == 0:
            return
        self._map[rid] = r
        self._map.move_to_end(rid)
        while len(self._map) > self.capacity:
            self._map.popitem(last=False)

    def get(self, rid: str, owner: str | None) -> StoredResponse | None:
        """The response if it exists and `owner` may see it (a use counts as recent)."""
        r = self._map.get(rid)
        if r is None or r.owner != owner:
            return None
        self._map.move_to_end(rid)
        return r

    def remove(self, rid: str, owner: str | None) -> bool:
        r = self._map.get(rid)
        if r is None or r.owner != owner:
            return False
        del self._map[rid]
        return True
