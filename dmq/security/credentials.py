"""SCRAM credentials as Kafka keeps them: per user and mechanism, salt, stored key,
server key and iterations (never the password), in the metadata store's user configs
(``/config/users/<user>`` in ZooKeeper, the embedded JSON alone).

``ScramCredentials`` reads them for every login (the store's watch-fed cache: a change
made through any broker counts on every broker at once) and validates and applies
AlterUserScramCredentials' changes with Kafka's errors. Event-loop thread only.
"""

from __future__ import annotations

from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from dmq.cluster.metadata import MetadataStore
from dmq.protocol.scram import (
    MAX_ITERATIONS,
    MECHANISM_NAMES,
    MIN_ITERATIONS,
    ScramCredential,
    ScramError,
    credential_from_salted,
)


@dataclass(frozen=True, slots=True)
class Upsertion:
    user: str
    mechanism: int  # MECHANISM_IDS
    iterations: int
    salt: bytes
    salted_password: bytes

    def __repr__(self) -> str:  # the salted password is a secret
        return f"Upsertion({self.user!r}, {self.mechanism}, {self.iterations})"


@dataclass(frozen=True, slots=True)
class Deletion:
    user: str
    mechanism: int


@dataclass(frozen=True, slots=True)
class UserResult:
    user: str
    error: ErrorCode
    message: str | None


class ScramCredentials:
    def __init__(self, store: MetadataStore) -> None:
        self.store = store

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        text = self.store.user_configs(user).get(mechanism)
        if text is None:
            return None
        try:
            return ScramCredential.from_kafka(text)
        except ScramError:
            return None

    def describe(self, user: str) -> list[tuple[int, int]]:
        """(mechanism id, iterations) of each of the user's credentials."""
        out = []
        for mech_id, name in sorted(MECHANISM_NAMES.items()):
            cred = self.get(user, name)
            if cred is not None:
                out.append((mech_id, cred.iterations))
        return out

    def users(self) -> list[str]:
        return [u for u in self.store.users() if self.describe(u)]

    async def alter(self, deletions: list[Deletion], upsertions: list[Upsertion]) -> list[UserResult]:
        """Apply the changes of one AlterUserScramCredentials request, one result per user
        in request order, as Kafka: a user named twice for one mechanism is
        DUPLICATE_RESOURCE, an unknown mechanism UNSUPPORTED_SASL_MECHANISM, iterations
        outside [4096, 16384] or an empty name UNACCEPTABLE_CREDENTIAL, deleting what does
        not exist RESOURCE_NOT_FOUND; a user with any error changes nothing."""
        order: list[str] = []
        errors: dict[str, tuple[ErrorCode, str]] = {}
        seen: dict[tuple[str, int], int] = {}
        changes: list[Deletion | Upsertion] = [*deletions, *upsertions]
        for change in changes:
            if change.user not in order:
                order.append(change.user)
            key = (change.user, change.mechanism)
            seen[key] = seen.get(key, 0) + 1
        for change in changes:
            user = change.user
            if user in errors:
                continue
            if seen[(user, change.mechanism)] > 1:
                errors[user] = (ErrorCode.duplicate_resource,
                                "A user credential cannot be altered twice in the same request")
            elif not user:
                errors[user] = (ErrorCode.unacceptable_credential, "Username must not be empty")
            elif change.mechanism not in MECHANISM_NAMES:
                errors[user] = (ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism")
            elif isinstance(change, Upsertion):
                if not MIN_ITERATIONS <= change.iterations <= MAX_ITERATIONS:
                    errors[user] = (ErrorCode.unacceptable_credential,
                                    f"Iterations {change.iterations} must be between "
                                    f"{MIN_ITERATIONS} and {MAX_ITERATIONS}")
                elif not change.salt or not change.salted_password:
                    errors[user] = (ErrorCode.unacceptable_credential,
                                    "Salt and salted password must not be empty")
            elif self.get(user, MECHANISM_NAMES[change.mechanism]) is None:
                errors[user] = (ErrorCode.resource_not_found,
                                "Attempt to delete a user credential that does not exist")
        results: list[UserResult] = []
        for user in order:
            if user in errors:
                error, message = errors[user]
                results.append(UserResult(user, error, message))
                continue
            configs = self.store.user_configs(user)
            for d in deletions:
                if d.user == user:
                    configs.pop(MECHANISM_NAMES[d.mechanism], None)
            for u in upsertions:
                if u.user == user:
                    name = MECHANISM_NAMES[u.mechanism]
                    configs[name] = credential_from_salted(name, u.salted_password, u.salt,
                                                           u.iterations).to_kafka()
            try:
                await self.store.set_user_configs(user, configs)
            except Exception as e:  # noqa: BLE001 - MetadataError, ZooKeeper unreachable
                error = ErrorCode[getattr(e, "error", "unknown_server_error")] \
                    if getattr(e, "error", None) in ErrorCode.__members__ else ErrorCode.unknown_server_error
                results.append(UserResult(user, error, str(e)))
                continue
            results.append(UserResult(user, ErrorCode.none, None))
        return results
