"""Decoding of the few protobuf request bodies clients send for built-in kinds.

client-go's typed clients (kubectl `create configmap|secret` and `auth can-i`, helm's release
storage) encode ConfigMaps, Secrets and SelfSubjectAccessReviews as protobuf, with no JSON
fallback. Field numbers are those of
k8s.io/api core/v1 and k8s.io/apimachinery meta/v1 `generated.proto`.
"""

from __future__ import annotations

import base64
from typing import Any

from .errors import ApiError

MAGIC = b"k8s\x00"
Fields = list[tuple[int, int | bytes]]


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _fields(data: bytes) -> Fields:
    """(field number, value) pairs: ints for varints, bytes for length-delimited values."""
    out: Fields = []
    pos = 0
    while pos < len(data):
        tag, pos = _varint(data, pos)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            value, pos = _varint(data, pos)
            out.append((number, value))
        elif wire == 2:
            length, pos = _varint(data, pos)
            out.append((number, data[pos:pos + length]))
            pos += length
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            raise ApiError(400, f"unsupported protobuf wire type {wire}", "BadRequest")
    return out


def _text(value: int | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _raw(value: int | bytes) -> bytes:
    return value if isinstance(value, bytes) else b""


def _map_entry(value: int | bytes) -> tuple[str, bytes]:
    entry = dict(_fields(_raw(value)))
    return _text(entry.get(1, b"")), _raw(entry.get(2, b""))


def _owner_reference(value: int | bytes) -> dict[str, Any]:
    names = {1: "kind", 3: "name", 4: "uid", 5: "apiVersion"}
    ref: dict[str, Any] = {}
    for number, item in _fields(_raw(value)):
        if number in names:
            ref[names[number]] = _text(item)
        elif number in (6, 7):
            ref["controller" if number == 6 else "blockOwnerDeletion"] = bool(item)
    return ref


def _object_meta(data: bytes) -> dict[str, Any]:
    strings = {1: "name", 2: "generateName", 3: "namespace", 5: "uid", 6: "resourceVersion"}
    meta: dict[str, Any] = {}
    for number, value in _fields(data):
        if number in strings:
            meta[strings[number]] = _text(value)
        elif number in (11, 12):
            key, item = _map_entry(value)
            meta.setdefault("labels" if number == 11 else "annotations", {})[key] = item.decode()
        elif number == 13:
            meta.setdefault("ownerReferences", []).append(_owner_reference(value))
        elif number == 14:
            meta.setdefault("finalizers", []).append(_text(value))
    return meta


def _config_map(raw: bytes) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for number, value in _fields(raw):
        if number == 1:
            obj["metadata"] = _object_meta(_raw(value))
        elif number == 2:
            key, item = _map_entry(value)
            obj.setdefault("data", {})[key] = item.decode()
        elif number == 3:
            key, item = _map_entry(value)
            obj.setdefault("binaryData", {})[key] = base64.b64encode(item).decode()
        elif number == 4:
            obj["immutable"] = bool(value)
    return obj


def _secret(raw: bytes) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for number, value in _fields(raw):
        if number == 1:
            obj["metadata"] = _object_meta(_raw(value))
        elif number == 2:
            key, item = _map_entry(value)
            obj.setdefault("data", {})[key] = base64.b64encode(item).decode()
        elif number == 3:
            obj["type"] = _text(value)
        elif number == 4:
            key, item = _map_entry(value)
            obj.setdefault("data", {})[key] = base64.b64encode(item).decode()
        elif number == 5:
            obj["immutable"] = bool(value)
    return obj


_RESOURCE_ATTRIBUTES = ("namespace", "verb", "group", "version", "resource", "subresource",
                        "name")


def _self_subject_access_review(raw: bytes) -> dict[str, Any]:
    """authorization/v1 SelfSubjectAccessReview (`kubectl auth can-i`)."""
    spec: dict[str, Any] = {}
    for number, value in _fields(raw):
        if number != 2:
            continue
        for field, attributes in _fields(_raw(value)):
            names = _RESOURCE_ATTRIBUTES if field == 1 else ("path", "verb")
            key = "resourceAttributes" if field == 1 else "nonResourceAttributes"
            spec[key] = {names[n - 1]: _text(v) for n, v in _fields(_raw(attributes))
                         if n <= len(names)}
    return {"spec": spec}


DECODERS = {("v1", "ConfigMap"): _config_map, ("v1", "Secret"): _secret,
            ("authorization.k8s.io/v1", "SelfSubjectAccessReview"): _self_subject_access_review}


def decode(body: bytes) -> dict[str, Any]:
    """A protobuf-encoded object as JSON; 415 for kinds the stand-in cannot decode."""
    if not body.startswith(MAGIC):
        raise ApiError(400, "protobuf body without the k8s envelope", "BadRequest")
    envelope = dict(_fields(body[len(MAGIC):]))
    type_meta = dict(_fields(_raw(envelope.get(1, b""))))
    api_version, kind = _text(type_meta.get(1, b"")), _text(type_meta.get(2, b""))
    decoder = DECODERS.get((api_version, kind))
    if decoder is None:
        raise ApiError(415, f"the stand-in decodes protobuf only for ConfigMap, Secret and "
                            f"SelfSubjectAccessReview, not "
                            f"{api_version} {kind}: send JSON (kubectl apply -f)",
                       "UnsupportedMediaType")
    obj = decoder(_raw(envelope.get(2, b"")))
    obj["apiVersion"], obj["kind"] = api_version, kind
    return obj
