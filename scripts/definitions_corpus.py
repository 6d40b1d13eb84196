"""Installs the public part of the definitions corpus (tests/data/definitions/PUBLIC.md): RabbitMQ
definitions files that other projects publish, which tests/integration/test_definitions_corpus.py
takes both ways on a real broker beside rabbitry's own files. They are not copied into this
repository: each is made here, at setup time, from a release of its project on PyPI, pinned by
the release's sha256, the template's sha256 inside it and the sha256 of what it renders to.

The files so published are templates of the definitions file a deployed broker loads at boot:
kolla-ansible's (OpenStack's deployment of RabbitMQ, Apache-2.0), one per change to it from 2017
to 2026, Jinja templates rendered here with Jinja2 (rabbitry's own dependency) the way Ansible
renders them; and vantage6's (Apache-2.0), a dict literal its CLI fills in and writes out, done
here the same way without running its code. Each is made with the variables of its variant
(users and passwords of the test's own, each option that changes what the file holds turned on
or off). A release's artifact is downloaded once for all of its variants; a second run with
every file in place and current does nothing.

Any mismatch (artifact, template, rendered file) or a download that fails stops the run with an
error naming it: scripts/setup.sh fails, never leaving a file out silently.

Usage: .venv/bin/python scripts/definitions_corpus.py [DEST_DIR]
"""

from __future__ import annotations

import ast
import base64
import hashlib
import io
import json
import os
import sys
import tarfile
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PYPI_FILES = "https://files.pythonhosted.org/packages/"


@dataclass(frozen=True)
class Template:
    """A definitions template inside a published release."""

    package: str
    version: str
    path: str  # the artifact's path under PYPI_FILES
    sha256: str  # the artifact's, as the registry lists it
    member: str  # the template's path inside the artifact
    member_sha256: str
    era: str  # the RabbitMQ releases the project deployed with it
    kind: str = "ansible"  # how the project makes its file of it: "ansible" or "vantage6"

    @property
    def url(self) -> str:
        return PYPI_FILES + self.path


@dataclass(frozen=True)
class Variant:
    """One rendering of a template: a file of the corpus."""

    name: str  # the file's name, without .json
    template: Template
    shows: str
    variables: dict[str, Any] = field(default_factory=dict)
    sha256: str = ""  # of the rendered file's JSON, canonical (keys sorted, no spaces)


MEMBER = "ansible/roles/rabbitmq/templates/definitions.json.j2"


def _kolla(version: str, path: str, sha256: str, member_sha256: str, era: str) -> Template:
    root = path.rsplit("/", 1)[1].removesuffix(".tar.gz")  # the sdist's top folder
    return Template("kolla-ansible", version, path, sha256, f"{root}/{MEMBER}", member_sha256, era)


K4 = _kolla(
    "4.0.0",
    "68/2b/c496f605c5329ad3827ab19bc7837e2397c8fea5fd964ddf5a4c34a852a3/kolla-ansible-4.0.0.tar.gz",
    "b74c63f1218352cd778aedbfb58f4c3d62d4c5903ec194a76db09b374e1b3c85",
    "b9950024275f4529e936cb03cbbb5c7ac65b9e30718754995165d1e805b62708",
    "Ocata, 2017: RabbitMQ 3.6",
)
K5 = _kolla(
    "5.0.0",
    "81/21/4a8427d1dd546dfb235e993c6a1c573a09b29ee3ab613c049f061a5d675b/kolla-ansible-5.0.0.tar.gz",
    "06f09185b2c9e60e3d57da7abc9a84ba63f5119a210b2b379bc8f852be3d8b7d",
    "8ade8ab4452511e6555db59593152446e505019f24d1ce95c3d695951168b57f",
    "Pike, 2017: RabbitMQ 3.6",
)
K6 = _kolla(
    "6.0.0",
    "b1/e1/14dfcf95683bd44598804318d02f78dc4426a49d6a134c269956fed8ab3d/kolla-ansible-6.0.0.tar.gz",
    "f020455f1bba4a0be1f34f4e263d1a41a805716455a26a6be91e13b32dc348b3",
    "704d2841d3e4f120a6d5ac9d02e1a2d81fd18247071d11f3103093babc0e8037",
    "Queens to Yoga, 2018-2022: RabbitMQ 3.7 and 3.8",
)
K11 = _kolla(
    "11.4.0",
    "52/f2/3ea8bd65846e75abf01524971b9bc8ce61afab7a6121c4b62277764cefd8/kolla-ansible-11.4.0.tar.gz",
    "97f644fa72ff0e07f84952dcf00ec1480082c594914dfaff290123770292eb47",
    "a6ccca60366c1f4eac6d5466743973fd3fa6ace11daf84e815defda7645fa1fe",
    "Wallaby, 2022: RabbitMQ 3.8",
)
K13 = _kolla(
    "13.9.0",
    "a8/28/00dd22d92ae4ea6b9ed320d922b4a589dae86950a2c009a9a6082f7248f8/kolla-ansible-13.9.0.tar.gz",
    "ddf7dd59dba5df98dd6830a12476b974961ca3e5efad69966c806f08eb236156",
    "6a81a19a3ed2aa3b662f12534fbb954bfe5b7a3df99604d931f1a93fc19a89de",
    "Yoga, 2023: RabbitMQ 3.9 and 3.10",
)
K14 = _kolla(
    "14.0.0",
    "44/b3/cddf58ff30f2f736dc98bd1177be3ebdae786eec8e4e89cc344a7b677db1/kolla-ansible-14.0.0.tar.gz",
    "6baa016a6d191c1829f3292f98767cfb3dfa14a8e5174176f01b4df61123631b",
    "ae6da5c1cb7046bd587b62246f7523f02f1c22b4b2121947a3ee580f18ca70c6",
    "Zed, 2022: RabbitMQ 3.10",
)
K14_11 = _kolla(
    "14.11.0",
    "e9/19/3fbc5032e43854deb5ec9aa9c4f18d202bdb33286b6c1c9e00ad5bdabfb7/kolla-ansible-14.11.0.tar.gz",
    "4578c496e0e8c4227dcb530c5c671f1911211ee430e605f688d3f49960ff59bf",
    "6be32671eb554120618dcd539b42601e6efa2f6c0d4fb3c591f81c0d23075db4",
    "Zed, 2024: RabbitMQ 3.10 and 3.11",
)
K16 = _kolla(
    "16.0.0",
    "b1/f7/27d79b00fd6546953e99e0a32eb39ab03d772abfb14fd36059ec68f71003/kolla-ansible-16.0.0.tar.gz",
    "da03d9a67722632ac3b2b13ca2ff27993b9ac41cd5ef7de8826a8996180eb475",
    "db37c0641a1ef55dad9a51a398e4adb8c9a30c2ac71f7392325ad210bfa3b102",
    "2023.1 and 2023.2: RabbitMQ 3.11 and 3.12",
)
K18 = _kolla(
    "18.0.0",
    "c5/7a/555afd3547e44893b865af988bce7ec761ce06ab8cde1d2ce8c4bbdf442e/kolla-ansible-18.0.0.tar.gz",
    "6116a493b7697e4be21012415ae013949d2603a00296f54b492722f235d96ac4",
    "c06f8bc74d28806d7a3c1e196fb54db10e98158cf132e7ea732dcbb449118b55",
    "2024.1 and 2024.2: RabbitMQ 3.12 and 3.13",
)
K22 = _kolla(
    "22.0.0",
    "2a/07/25c6f0e90814cf669a13c8d1b4b6b2529a4730695ce5f4f4df0460373ddd/kolla_ansible-22.0.0.tar.gz",
    "ad0484d39ece1bf66c55cb528f9fc037872512209ff9f67eaeac2586c5347e8e",
    "aafa836418962cda6ad950f5c94777c583c9a929e5a5fb5e02351c9816d0e0be",
    "2026.1: RabbitMQ 4.x",
)

V6 = Template(
    "vantage6",
    "4.15.2",
    "eb/6f/3b5bb6de7edef187b432c6121206f88ed2abd35b302f823a436b6f533da6/vantage6-4.15.2.tar.gz",
    "0b7e96486182cf90137addb59cbff1b9bbe39e720227f0f9cf4a9fa5a65d117e",
    "vantage6-4.15.2/vantage6/cli/rabbitmq/definitions.py",
    "09c4bd8c6ed9181e8b8f31d0a99d859620eeacf22d52f3528c7ace629b4e4598",
    "written as a RabbitMQ 3.6.6 export; deployed 2020-2025 with RabbitMQ 3.8 to 3.13",
    kind="vantage6",
)

BASE: dict[str, Any] = {
    # The test's own users and passwords (kolla's inventories make their own).
    "rabbitmq_user": "openstack",
    "rabbitmq_password": "corpus-openstack-secret",
    "role_rabbitmq_user": "openstack",
    "role_rabbitmq_password": "corpus-openstack-secret",
    "role_rabbitmq_monitoring_user": "",
    "role_rabbitmq_monitoring_password": "corpus-monitoring-secret",
    "murano_agent_rabbitmq_vhost": "muranoagent",
    "murano_agent_rabbitmq_user": "muranoagent",
    "murano_agent_rabbitmq_password": "corpus-murano-secret",
    # kolla-ansible's defaults
    "project_name": "rabbitmq",
    "rabbitmq_remove_ha_all_policy": False,
    "om_enable_rabbitmq_high_availability": False,
    "rabbitmq_ha_replica_count": None,
    "rabbitmq_ha_promote_on_shutdown": None,
    "rabbitmq_message_ttl_ms": None,
    "rabbitmq_queue_expiry_ms": None,
    "om_enable_rabbitmq_stream_fanout": False,
    "rabbitmq_stream_max_segment_size_bytes": 500000000,
    "rabbitmq_stream_segment_max_age": "1800s",
}
MONITORING = {"role_rabbitmq_monitoring_user": "monitoring"}
OUTWARD = {"project_name": "outward_rabbitmq"}
HA = {
    "om_enable_rabbitmq_high_availability": True,
    "rabbitmq_ha_replica_count": 2,
    "rabbitmq_ha_promote_on_shutdown": "always",
}
HA_TTL = {**HA, "rabbitmq_message_ttl_ms": 600000, "rabbitmq_queue_expiry_ms": 3600000}

VARIANTS: tuple[Variant, ...] = (
    Variant(
        "kolla-ansible-4.0.0",
        K4,
        "a plain password, an `ha-all` policy of `ha-mode: all` applied to all",
        {},
        "b98a5bc0b0d67f5faf4c9539a2f1cc184bbe0efa1185f942cc46a6d1a0276331",
    ),
    Variant(
        "kolla-ansible-5.0.0-outward",
        K5,
        "the outward broker: a second vhost, a `management` user, `ha-all` in both vhosts",
        OUTWARD,
        "9f412b0879ce5635e467e443993500bbed4ac863d984f92bcd274e92ff49d006",
    ),
    Variant(
        "kolla-ansible-6.0.0-monitoring",
        K6,
        "a `monitoring` user that reads everything and configures and writes nothing (`^$`)",
        MONITORING,
        "2a4fa3f19cdbbb1659e93c96c67a03d33db67fce7e1803744369bcc73476481b",
    ),
    Variant(
        "kolla-ansible-6.0.0-outward-monitoring",
        K6,
        "three users (administrator, monitoring, management) over two vhosts, `ha-all` in both",
        {**MONITORING, **OUTWARD},
        "5d794f28b7ba336d817d493d4fedc3771b6d0e21892f4a1962e56248fc2d3fbb",
    ),
    Variant(
        "kolla-ansible-11.4.0-without-ha",
        K11,
        '`rabbitmq_remove_ha_all_policy`: no policy (written `"policies":[]`)',
        {"rabbitmq_remove_ha_all_policy": True},
        "ed8480c492e98bc2749323aad924ce2aade66221aefd2a6f50eacf0864f548a6",
    ),
    Variant(
        "kolla-ansible-13.9.0-ha-exactly",
        K13,
        "`ha-mode: exactly`, `ha-params: 2`, `ha-promote-on-shutdown`, a pattern with a negative"
        " lookahead and an escaped dot",
        {**HA, **MONITORING},
        "fa4a554fb2819acf501ae8a1a50fb83b2adcf93933bfd2f2d6f28135b0a6f197",
    ),
    Variant(
        "kolla-ansible-13.9.0-ha-all-outward",
        K13,
        "`ha-mode: all` under the lookahead pattern in two vhosts",
        {**OUTWARD, "om_enable_rabbitmq_high_availability": True},
        "406a6bccba982e244f187fbe62bd1bc74b3cd4b0ea5974d81a6e6f8d98c29cbc",
    ),
    Variant(
        "kolla-ansible-14.0.0-outward",
        K14,
        "no policy, two vhosts, a `management` user",
        OUTWARD,
        "15bab535ef4460621319f4aed73013f88caeda7d500352df5ee45c411bc1b930",
    ),
    Variant(
        "kolla-ansible-14.11.0-ha-ttl",
        K14_11,
        "mirroring with `message-ttl` and `expires` in the policy",
        {**HA_TTL, **MONITORING},
        "0f3947fb1761c43ac51dfb8332e481aa86a55e021080aba2fd6a47c2dde92112",
    ),
    Variant(
        "kolla-ansible-16.0.0-ha-ttl-outward",
        K16,
        "mirroring with `message-ttl` and `expires` in two vhosts",
        {**HA_TTL, **OUTWARD},
        "57240a25ee7fecf97271ae2b71bd0164c4e365227c3ef296ffe223493cecd895",
    ),
    Variant(
        "kolla-ansible-18.0.0-ha-all-ttl",
        K18,
        "`ha-mode: all` with `message-ttl` only",
        {"om_enable_rabbitmq_high_availability": True, "rabbitmq_message_ttl_ms": 600000},
        "14e666ab2f82018d3c36bc18636d17070d1b2efbd445e1b5b3ca3f636d6f59bd",
    ),
    Variant(
        "kolla-ansible-18.0.0",
        K18,
        "kolla's default since quorum queues: users and permissions, no policy",
        MONITORING,
        "7d56517a934db412881a2e55560b4406b8ee77168d61f256732294c8aa6112ec",
    ),
    Variant(
        "kolla-ansible-22.0.0-stream-fanout",
        K22,
        "a policy `apply-to: streams` with `stream-max-segment-size-bytes` and `max-age`",
        {**MONITORING, "om_enable_rabbitmq_stream_fanout": True},
        "3b0a8ec4ceebbe2469430dfd3d1ddc9f920122bca35ab2df0fff35a88787e21a",
    ),
    Variant(
        "vantage6-4.15.2",
        V6,
        "a 3.6.6 export's shape: `rabbit_version`, every kind listed (empty), a `password_hash`"
        " with `hashing_algorithm` sha256, tags as one string",
        {"user": "vantage6", "password": "corpus-vantage6-secret", "vhost": "vantage6"},
        "d81d6175177215f692943b4140646d71eb269cade73165e03b7b8f1499aea445",
    ),
)


class CorpusError(Exception):
    """A download, a pin or a rendering that failed: nothing of that file is written."""


def _ansible_bool(value: Any) -> bool:
    """Ansible's `bool` filter."""
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in ("yes", "on", "1", "true")


def render(template: str, variables: dict[str, Any]) -> str:
    """``template`` rendered as Ansible's template module renders it: trim_blocks on unless its
    first line (`#jinja2: trim_blocks: False`) says otherwise, that line left out."""
    import jinja2  # rabbitry's dependency: the virtualenv has it

    trim_blocks = True
    first, _, rest = template.partition("\n")
    if first.startswith("#jinja2:"):
        template = rest
        trim_blocks = "trim_blocks: False" not in first
    environment = jinja2.Environment(
        trim_blocks=trim_blocks, undefined=jinja2.StrictUndefined, keep_trailing_newline=True
    )
    environment.filters["bool"] = _ansible_bool
    return environment.from_string(template).render(**variables)


VANTAGE6_SALT = b"v6\x00\x01"
"""The salt of the hash the vantage6 file gets (vantage6 draws one at random: a fixed one keeps
the file pinnable)."""


def render_vantage6(source: str, variables: dict[str, Any]) -> str:
    """The definitions file vantage6 writes (vantage6/cli/rabbitmq/queue_manager.py,
    `_get_rabbitmq_definitions`): its module's `RABBITMQ_DEFINITIONS` literal, read without
    running the module, with the first user, vhost and permission set, the password hashed as
    the broker hashes (sha256 of salt + password, the salt before it, in base64), written out
    with `json.dump(..., indent=2)`."""
    literal = None
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "RABBITMQ_DEFINITIONS" for t in node.targets
        ):
            literal = ast.literal_eval(node.value)
    if not isinstance(literal, dict):
        raise CorpusError("vantage6: no RABBITMQ_DEFINITIONS literal in its definitions module")
    digest = hashlib.sha256(VANTAGE6_SALT + str(variables["password"]).encode()).digest()
    literal["users"][0]["name"] = variables["user"]
    literal["users"][0]["password_hash"] = base64.b64encode(VANTAGE6_SALT + digest).decode()
    literal["permissions"][0]["user"] = variables["user"]
    literal["vhosts"][0]["name"] = variables["vhost"]
    literal["permissions"][0]["vhost"] = variables["vhost"]
    return json.dumps(literal, indent=2)


def canonical_sha256(text: str) -> str:
    return hashlib.sha256(json.dumps(json.loads(text), sort_keys=True).encode()).hexdigest()


def _download(template: Template) -> bytes:
    try:
        with urllib.request.urlopen(template.url, timeout=120) as answer:
            data: bytes = answer.read()
    except OSError as exc:
        raise CorpusError(f"cannot download {template.url}: {exc}") from exc
    if hashlib.sha256(data).hexdigest() != template.sha256:
        raise CorpusError(f"{template.url} does not match its pinned sha256")
    return data


def _template_text(template: Template, artifact: bytes) -> str:
    with tarfile.open(fileobj=io.BytesIO(artifact), mode="r:gz") as archive:
        try:
            member = archive.extractfile(template.member)
        except KeyError:
            member = None
        if member is None:
            raise CorpusError(f"{template.member} is not in {template.url}")
        raw = member.read()
    if hashlib.sha256(raw).hexdigest() != template.member_sha256:
        raise CorpusError(f"{template.member} in {template.url} does not match its pinned sha256")
    return raw.decode()


def stamp_of(variant: Variant) -> str:
    """What a file in place must have been made from to be current."""
    t = variant.template
    return f"{t.url} {t.member_sha256} {json.dumps(variant.variables, sort_keys=True)}"


def current(dest: Path, variant: Variant) -> bool:
    target, stamp = dest / f"{variant.name}.json", dest / f"{variant.name}.json.from"
    return (
        target.is_file()
        and stamp.is_file()
        and stamp.read_text().strip() == stamp_of(variant)
        and canonical_sha256(target.read_text()) == variant.sha256
    )


def install(dest: Path, variants: tuple[Variant, ...] = VARIANTS) -> list[str]:
    """Makes every variant not current in ``dest``; returns the names it made."""
    missing = [v for v in variants if not current(dest, v)]
    artifacts: dict[str, str] = {}
    made = []
    for variant in missing:
        template = variant.template
        if template.url not in artifacts:
            artifacts[template.url] = _template_text(template, _download(template))
        source = artifacts[template.url]
        if template.kind == "vantage6":
            text = render_vantage6(source, variant.variables)
        else:
            text = render(source, {**BASE, **variant.variables})
        try:
            digest = canonical_sha256(text)
        except ValueError as exc:
            raise CorpusError(f"{variant.name}: the rendered template is not JSON: {exc}") from exc
        if digest != variant.sha256:
            raise CorpusError(
                f"{variant.name}: the rendered file's sha256 is {digest}, not the pinned"
                f" {variant.sha256 or '(none)'}"
            )
        dest.mkdir(parents=True, exist_ok=True)
        partial = dest / f".{variant.name}.{os.getpid()}"
        partial.write_text(text)
        partial.replace(dest / f"{variant.name}.json")
        (dest / f"{variant.name}.json.from").write_text(stamp_of(variant) + "\n")
        made.append(variant.name)
    return made


def main(dest: Path) -> int:
    names = [v.name for v in VARIANTS]
    digests = [v.sha256 for v in VARIANTS]
    if len(set(names)) < len(names) or len(set(digests)) < len(digests):
        # every file counts once: two variants that render the same file are one
        print("definitions_corpus: two variants share a name or a file", file=sys.stderr)
        return 1
    try:
        made = install(dest)
    except CorpusError as exc:
        print(f"definitions_corpus: {exc}", file=sys.stderr)
        return 1
    if made:
        print(f"definitions_corpus: made {len(made)} files in {dest}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    root = Path(__file__).resolve().parents[1]
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else root / ".rabbitry" / "definitions-corpus"
    sys.exit(main(target))
