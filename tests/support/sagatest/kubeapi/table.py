"""meta.k8s.io/v1 Table output: the printer columns `kubectl get` shows."""

from __future__ import annotations

import datetime
from typing import Any

from .resources import PrinterColumn, ResourceType
from .selectors import json_path

TABLE_MEDIA = "as=Table"

_DEFAULT_COLUMNS: dict[tuple[str, str], tuple[PrinterColumn, ...]] = {
    ("", "pods"): (PrinterColumn("Status", "string", ".status.phase"),),
    ("", "namespaces"): (PrinterColumn("Status", "string", ".status.phase"),),
    ("batch", "jobs"): (PrinterColumn("Succeeded", "integer", ".status.succeeded"),),
}
_AGE = PrinterColumn("Age", "date", ".metadata.creationTimestamp")


def wants_table(accept: str) -> bool:
    """True when the first acceptable media type is a Table (kubectl get)."""
    first = accept.split(",")[0]
    return TABLE_MEDIA in first.replace(" ", "")


def human_duration(seconds: float) -> str:
    """apimachinery's duration.HumanDuration, as kubectl prints ages."""
    s = int(seconds)
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    days = hours // 24
    if hours < 192:
        return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"
    if days < 365 * 2:
        return f"{days}d"
    years = days // 365
    if years < 8:
        return f"{years}y{days % 365}d" if days % 365 else f"{years}y"
    return f"{years}y"


def _age(timestamp: Any) -> str:
    if not isinstance(timestamp, str):
        return "<unknown>"
    then = datetime.datetime.strptime(timestamp, "%Y-%m-%dT%H:%M:%SZ").replace(
        tzinfo=datetime.UTC)
    return human_duration((datetime.datetime.now(datetime.UTC) - then).total_seconds())


def columns_for(rt: ResourceType) -> tuple[PrinterColumn, ...]:
    if rt.printer_columns:
        return rt.printer_columns
    return _DEFAULT_COLUMNS.get((rt.group, rt.plural), ()) + (_AGE,)


def _cell(column: PrinterColumn, obj: dict[str, Any]) -> Any:
    value = json_path(obj, column.json_path)
    if column.type == "date":
        return _age(value) if value is not None else None
    if value is None:
        return None
    if column.type == "integer" and isinstance(value, int | float | str):
        try:
            return int(value)
        except ValueError:
            return value
    if column.type == "string" and not isinstance(value, str):
        return str(value)
    return value


def _row_object(obj: dict[str, Any], include: str) -> dict[str, Any] | None:
    if include == "None":
        return None
    if include == "Object":
        return obj
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
            "metadata": obj.get("metadata", {})}


def table(rt: ResourceType, objects: list[dict[str, Any]], resource_version: str,
          include_object: str = "Metadata") -> dict[str, Any]:
    columns = columns_for(rt)
    definitions = [{"name": "Name", "type": "string", "format": "name",
                    "description": "Name must be unique within a namespace.", "priority": 0}]
    definitions += [{"name": c.name, "type": c.type, "format": c.format,
                     "description": c.description, "priority": c.priority} for c in columns]
    rows = []
    for obj in objects:
        row: dict[str, Any] = {
            "cells": [obj["metadata"]["name"]] + [_cell(c, obj) for c in columns]}
        embedded = _row_object(obj, include_object)
        if embedded is not None:
            row["object"] = embedded
        rows.append(row)
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1",
            "metadata": {"resourceVersion": resource_version},
            "columnDefinitions": definitions, "rows": rows}
