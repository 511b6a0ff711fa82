"""What the operator reflects of a run, as one comparable value per run (`LogFingerprint`), read
for a whole batch of runs in one statement: the operator checks its unfinished runs this way
and resyncs only those whose fingerprint moved (`agentsaga.operator.log_watch`)."""

from __future__ import annotations

from collections.abc import Sequence

from agentsaga.states import CORRECTIONS_PENDING
from agentsaga.store.base import StoreBase

LogFingerprint = tuple[str, int, int, str, str, str, str, str]
"""(run state, owner epoch, irreversible before pivot, pivot state, plan hash,
step statuses in step order, pending corrections, steps waiting for a person)."""

_PENDING = ", ".join(f"'{s}'" for s in sorted(CORRECTIONS_PENDING))

_FINGERPRINTS = (
    "SELECT r.run_id, r.state, r.owner_epoch, r.irreversible_before_pivot,"
    " coalesce(r.pivot->>'state', ''), coalesce(r.pivot->>'planHash', ''),"
    " coalesce((SELECT string_agg(s.status || ':' || coalesce(s.comp_status, ''), ','"
    "   ORDER BY s.step_idx) FROM saga_log s WHERE s.run_id = r.run_id), ''),"
    " coalesce((SELECT string_agg(c.step_idx || ':' || c.state, ',' ORDER BY c.step_idx)"
    f"   FROM corrections c WHERE c.run_id = r.run_id AND c.state IN ({_PENDING})), ''),"
    " coalesce((SELECT string_agg(w.step_idx::text, ',' ORDER BY w.step_idx)"
    "   FROM step_settlements w WHERE w.run_id = r.run_id AND w.state = 'Waiting'"
    "   AND EXISTS (SELECT 1 FROM saga_log l WHERE l.run_id = w.run_id"
    "   AND l.step_idx = w.step_idx AND l.status = 'UNKNOWN')), '')"
    " FROM saga_runs r WHERE r.run_id = ANY(%s)"
)


class FingerprintStatements(StoreBase):
    def log_fingerprints(self, run_ids: Sequence[str]) -> dict[str, LogFingerprint]:
        """The fingerprint of each of these runs that exists (one statement)."""
        if not run_ids:
            return {}
        with self.db.connection() as conn:
            rows = conn.execute(_FINGERPRINTS, (list(run_ids),)).fetchall()
        return {str(r[0]): (str(r[1]), int(r[2]), int(r[3]), str(r[4]), str(r[5]), str(r[6]),
                            str(r[7]), str(r[8])) for r in rows}
