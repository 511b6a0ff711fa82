"""kopf's settings for agentsaga, applied in a startup handler: our own finalizer and
annotation prefix (`agentsaga.io`), a last-handled configuration and handler progress that are
masked, Events for warnings only (their messages are log records: masked when made), bounded
network retries, peering priority, and the admission webhook server when `--webhook-port` is
given."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import kopf

from agentsaga.operator import injection
from agentsaga.operator.config import FINALIZER, PREFIX
from agentsaga.operator.context import context
from agentsaga.redact import redact_value


class MaskedDiffBase(kopf.AnnotationsDiffBaseStorage):
    """kopf's last-handled configuration (an annotation), masked (`agentsaga.redact`). For a
    handler of a status field (`status.approval`, `status.settlements`, `status.corrections`)
    kopf keeps that field in it too, and a person's reason there may quote a card number or a
    secret: every status write of the operator is masked, and so is this one. kopf compares
    masked with masked, so its diffs still see every change but one to the secret alone."""

    def build(self, *, body: kopf.Body,
              extra_fields: Iterable[kopf.FieldSpec] | None = None) -> kopf.BodyEssence:
        essence: kopf.BodyEssence = redact_value(super().build(body=body,
                                                               extra_fields=extra_fields))
        return essence


class MaskedProgress(kopf.AnnotationsProgressStorage):
    """kopf's per-handler progress (an annotation), masked (`agentsaga.redact`): a failed
    handler's `message` is its exception's text, which may quote a card number or a secret."""

    def store(self, *, key: Any, record: Any, body: kopf.Body, patch: Any) -> None:
        super().store(key=key, record=redact_value(dict(record)), body=body, patch=patch)


@kopf.on.startup(id="agentsaga-settings")
def configure(settings: kopf.OperatorSettings, memo: Any, **_: Any) -> None:
    ctx = context(memo)
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = MaskedProgress(prefix=PREFIX)
    settings.persistence.diffbase_storage = MaskedDiffBase(
        prefix=PREFIX, key="last-handled-configuration")
    settings.posting.level = logging.WARNING
    settings.execution.default_backoff = max(1.0, ctx.config.resync_seconds)
    settings.networking.error_backoffs = [0.5, 1, 2, 3, 5, 8]
    settings.networking.request_timeout = 30.0
    settings.watching.server_timeout = ctx.config.watch_timeout_seconds
    settings.watching.client_timeout = ctx.config.watch_timeout_seconds + 15
    settings.watching.connect_timeout = 10.0
    if ctx.config.webhook_port is not None:
        injection.configure_admission(settings, port=ctx.config.webhook_port,
                                      cert_dir=ctx.config.webhook_cert_dir)
    else:
        # The injection handler is registered (kopf refuses to start without a server for it);
        # with injection off it is served on a random loopback port that nothing calls.
        settings.admission.server = kopf.WebhookServer(addr="127.0.0.1", insecure=True)
        settings.admission.managed = None
