"""The JVM side: jpype starts an in-process JVM whose JMX agent serves the ClusterInfo
MBean (a ``javax.management.DynamicMBean`` implemented in Python) to remote clients.

Remote JMX uses the JDK's own agent, configured by system properties at JVM start
(docs/design/dependencies.md#jpype1-the-jmx-bridge: the simplest way, and the one operators know):
RMI registry and connector on the one port ``jmx.port`` bound to ``jmx.host``, the JDK's password
and access files (readonly / readwrite users), optional TLS. Its configuration errors kill
the whole process inside ``startJVM`` (exit 1, message lost), so ``preflight`` checks
every one of them first and the master refuses to start with a clear message (exit 2).

Calls arrive on RMI threads; each is handed to the master's asyncio loop with
``run_coroutine_threadsafe`` and a timeout, so the cluster is only ever touched from its
loop. Every method raises only javax.management / java.lang exceptions: a Python
exception would reach the client as ``ClassNotFoundException: PyExceptionProxy``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import socket
import stat
import threading
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from master_service.jmx import jmx_service_url
from master_service.jmx.attributes import (
    ATTRIBUTES,
    BOOLEAN,
    DOUBLE,
    INT,
    LONG,
    MBEAN_DESCRIPTION,
    OPERATIONS,
    STRING,
    STRING_ARRAY,
    AttributeNotFound,
    InvalidArgument,
    InvalidAttributeValue,
    ManagementError,
    OperationFailed,
    OperationNotFound,
)

if TYPE_CHECKING:
    from master_service.config import MasterConfig
    from master_service.jmx.clusterinfo import ClusterInfo

log = logging.getLogger("txcluster.master.jmx")

# A small JVM: the bridge holds one MBean (docs/design/dependencies.md#jpype1-the-jmx-bridge:
# RSS +60-90 MB with these).
# -Xrs: the JVM leaves SIGTERM/SIGINT to Python; otherwise its own handler ends the
# process with 143 and the master never runs its orderly shutdown (txlog closed, ...).
JVM_OPTIONS = ("-Xrs", "-Xmx64m", "-Xms8m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
               "-XX:ReservedCodeCacheSize=32m", "-XX:MaxMetaspaceSize=64m",
               "-Djava.awt.headless=true")
ATTRIBUTE_TIMEOUT_S = 30.0
OPERATION_TIMEOUT_S = 600.0  # a restore or a backup of a large repository takes minutes
ACCESS_LEVELS = ("readonly", "readwrite")


# What jconsole and JMXConnectorFactory connect to (also: jconsole HOST:PORT).
service_url = jmx_service_url


# ---- checks before the JVM starts ----


def _private_file_problems(key: str, path: Path) -> list[str]:
    """The JDK agent refuses a password file that group or others may access at all."""
    try:
        st = path.stat()
    except OSError as exc:
        return [f"{key} {path}: {exc.strerror}"]
    if not stat.S_ISREG(st.st_mode):
        return [f"{key} {path} is not a file"]
    if st.st_mode & 0o077:
        return [f"{key} {path} is accessible by group or others (mode "
                f"{stat.S_IMODE(st.st_mode):03o}); the JVM refuses it: chmod 600 {path}"]
    return []


def _lines(key: str, path: Path, problems: list[str]) -> list[tuple[int, list[str]]]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        problems.append(f"{key} {path}: cannot read: {exc}")
        return []
    return [(n, line.split()) for n, line in enumerate(text.splitlines(), 1)
            if line.strip() and not line.lstrip().startswith("#")]


def password_users(path: Path, problems: list[str]) -> list[str]:
    """Users of a JDK password file ('user password'; JDK 17 rewrites it with hashes on
    the first login, still one user per line, first)."""
    users = []
    for n, fields in _lines("jmx.password-file", path, problems):
        if len(fields) < 2:
            problems.append(f"jmx.password-file {path} line {n}: expected 'user password'")
        else:
            users.append(fields[0])
    if not users and not problems:
        problems.append(f"jmx.password-file {path} holds no user")
    return users


def access_levels(path: Path, problems: list[str]) -> dict[str, str]:
    levels: dict[str, str] = {}
    for n, fields in _lines("jmx.access-file", path, problems):
        if len(fields) < 2 or fields[1] not in ACCESS_LEVELS:
            problems.append(f"jmx.access-file {path} line {n}: expected 'user readonly' or "
                            "'user readwrite'")
        else:
            levels[fields[0]] = fields[1]
    return levels


def port_problem(host: str, port: int) -> str | None:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        # Java's ServerSocket sets SO_REUSEADDR too: a port in TIME_WAIT is not "in use".
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            return f"jmx.port {port} on {host} cannot be used: {exc.strerror or exc}"
    return None


def preflight(config: MasterConfig) -> list[str]:
    """Every reason the JMX agent would fail to start (empty: it will start)."""
    if config.jmx_port is None:
        return []
    try:
        import jpype
    except ImportError:
        return ["jmx.port is set but JPype1 is not installed: pip install 'txcluster[jmx]'"]
    problems: list[str] = []
    try:
        jpype.getDefaultJVMPath()
    except jpype.JVMNotFoundException as exc:
        problems.append(f"jmx.port is set but no Java runtime was found ({exc}): install "
                        "one (Debian: openjdk-17-jre-headless) or set JAVA_HOME")
    if (problem := port_problem(config.jmx_host, config.jmx_port)) is not None:
        problems.append(problem)
    if config.jmx_password_file is not None:
        own = _private_file_problems("jmx.password-file", config.jmx_password_file)
        problems += own
        users = password_users(config.jmx_password_file, problems) if not own else []
        if config.jmx_access_file is not None:
            levels = access_levels(config.jmx_access_file, problems)
            problems += [f"jmx.access-file: user '{u}' has no password in jmx.password-file"
                         for u in levels if users and u not in users]
    if config.jmx_ssl:
        assert config.jmx_ssl_keystore is not None  # config check: jmx.ssl needs it
        if not config.jmx_ssl_keystore.is_file():
            problems.append(f"jmx.ssl.keystore {config.jmx_ssl_keystore} is not a file")
        if config.jmx_ssl_keystore_password_file is not None:
            problems += _private_file_problems("jmx.ssl.keystore-password-file",
                                               config.jmx_ssl_keystore_password_file)
    return problems


def _agent_properties(config: MasterConfig) -> dict[str, str]:
    """System properties of the JDK's JMX agent (RMI registry and connector on one port)."""
    assert config.jmx_port is not None
    host, port = config.jmx_host, str(config.jmx_port)
    # The stub handed to clients names this host: a wildcard bind advertises the host of
    # master-url instead, which clients can reach.
    advertised = host if host not in ("0.0.0.0", "::") else \
        (urlsplit(config.master_url).hostname or host)
    jmx = "com.sun.management.jmxremote"
    props = {f"{jmx}.port": port, f"{jmx}.rmi.port": port, f"{jmx}.host": host,
             f"{jmx}.local.only": "false", "java.rmi.server.hostname": advertised,
             f"{jmx}.authenticate": str(config.jmx_password_file is not None).lower(),
             f"{jmx}.ssl": str(config.jmx_ssl).lower(),
             f"{jmx}.registry.ssl": str(config.jmx_ssl).lower(),
             f"{jmx}.ssl.need.client.auth": "false"}
    if config.jmx_password_file is not None:
        props[f"{jmx}.password.file"] = str(config.jmx_password_file.resolve())
        props[f"{jmx}.access.file"] = str(_access_file(config).resolve())
    if config.jmx_ssl:
        assert config.jmx_ssl_keystore is not None
        props["javax.net.ssl.keyStore"] = str(config.jmx_ssl_keystore.resolve())
        if config.jmx_ssl_keystore_password_file is not None:
            props["javax.net.ssl.keyStorePassword"] = \
                config.jmx_ssl_keystore_password_file.read_text().strip()
    return props


def _access_file(config: MasterConfig) -> Path:
    """The configured access file, or one giving every user of the password file
    readwrite (the JDK's default file knows only its sample roles)."""
    if config.jmx_access_file is not None:
        return config.jmx_access_file
    assert config.jmx_password_file is not None
    path = config.data_dir / "jmx.access"
    users = password_users(config.jmx_password_file, [])
    path.write_text("# written by txcluster: no jmx.access-file configured\n"
                    + "".join(f"{u} readwrite\n" for u in users))
    path.chmod(0o600)
    return path


# ---- the bridge ----


class JmxBridge:
    """One per master process (a process has at most one JVM)."""

    def __init__(self, info: ClusterInfo, config: MasterConfig,
                 loop: asyncio.AbstractEventLoop) -> None:
        self.info = info
        self.config = config
        self.loop = loop
        self.jvm_start_s: float | None = None
        self._inflight: set[concurrent.futures.Future] = set()
        self._lock = threading.Lock()  # guards _inflight and _stopping (RMI threads)
        self._stopping = False
        self._name: Any = None

    @property
    def service_url(self) -> str:
        assert self.config.jmx_port is not None
        return service_url(self.config.jmx_host, self.config.jmx_port)

    def start(self) -> None:
        import jpype

        problems = preflight(self.config)
        if problems:
            raise RuntimeError("JMX cannot start: " + "; ".join(problems))
        started = time.monotonic()
        if not jpype.isJVMStarted():
            options = [*JVM_OPTIONS,
                       *(f"-D{k}={v}" for k, v in _agent_properties(self.config).items())]
            jpype.startJVM(*options, convertStrings=False)
        import jpype.imports  # makes `from java.lang import ...` work

        self.jvm_start_s = time.monotonic() - started
        if self.config.jmx_ssl:
            self._check_keystore()
        from java.lang.management import ManagementFactory  # type: ignore[import-not-found]
        from javax.management import ObjectName  # type: ignore[import-not-found]

        server = ManagementFactory.getPlatformMBeanServer()
        self._name = ObjectName(self.info.object_name)
        if server.isRegistered(self._name):
            server.unregisterMBean(self._name)
        server.registerMBean(_mbean_class()(self), self._name)
        log.info("JMX: %s at %s (jconsole %s:%s)%s; JVM started in %.2f s",
                 self.info.object_name, self.service_url, self.config.jmx_host,
                 self.config.jmx_port,
                 "" if self.config.jmx_password_file else ", WITHOUT authentication",
                 self.jvm_start_s)

    def _check_keystore(self) -> None:
        """The agent starts with a keystore it cannot open and fails only at the first
        connection: open it now, so a wrong password stops the master with the reason."""
        import jpype
        from java.io import File  # type: ignore[import-not-found]
        from java.security import KeyStore  # type: ignore[import-not-found]

        props = _agent_properties(self.config)
        password = props.get("javax.net.ssl.keyStorePassword", "")
        try:
            KeyStore.getInstance(File(props["javax.net.ssl.keyStore"]),
                                 jpype.JArray(jpype.JChar)(password))
        except jpype.JException as exc:
            raise RuntimeError(f"JMX cannot start: jmx.ssl.keystore "
                               f"{self.config.jmx_ssl_keystore} cannot be opened with the "
                               f"password of jmx.ssl.keystore-password-file: "
                               f"{exc.getMessage()}") from None

    def stop(self) -> None:
        """Unregister the MBean and release RMI threads waiting on the loop. The JVM itself
        ends with the process (jpype's exit hook); the agent's threads are daemons, so
        they do not hold the process."""
        with self._lock:
            self._stopping = True
            inflight = list(self._inflight)
        for fut in inflight:
            fut.cancel()
        if self._name is not None:
            from java.lang.management import ManagementFactory  # type: ignore[import-not-found]

            server = ManagementFactory.getPlatformMBeanServer()
            if server.isRegistered(self._name):
                server.unregisterMBean(self._name)
            self._name = None

    def run(self, coro: Coroutine[Any, Any, Any], timeout: float) -> Any:
        """Run ``coro`` on the master's loop from an RMI thread; its result or its error."""
        with self._lock:
            if self._stopping or self.loop.is_closed():
                coro.close()
                raise OperationFailed("the master is shutting down")
            fut = asyncio.run_coroutine_threadsafe(coro, self.loop)
            self._inflight.add(fut)
        try:
            return fut.result(timeout)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            raise OperationFailed(f"the master did not answer within {timeout:.0f} s") \
                from None
        except concurrent.futures.CancelledError:
            raise OperationFailed("the master is shutting down") from None
        finally:
            with self._lock:
                self._inflight.discard(fut)


# ---- Java conversions (only with the JVM running) ----


def to_java(java_type: str, value: Any) -> Any:
    import jpype
    from java.lang import Boolean, Double, Integer, Long  # type: ignore[import-not-found]

    if value is None:
        return None
    if java_type == LONG:
        return Long.valueOf(jpype.JLong(value))
    if java_type == INT:
        return Integer.valueOf(jpype.JInt(value))
    if java_type == DOUBLE:
        return Double.valueOf(jpype.JDouble(value))
    if java_type == BOOLEAN:
        return Boolean.valueOf(jpype.JBoolean(value))
    if java_type == STRING:
        return jpype.JString(value)
    if java_type == STRING_ARRAY:
        return jpype.JArray(jpype.JString)([jpype.JString(v) for v in value])
    raise TypeError(f"no Java conversion for {java_type}")


def from_java(value: Any) -> Any:
    """A Java value from a client as plain Python (``coerce`` then checks the type)."""
    import jpype
    from java.lang import Boolean, Number, String  # type: ignore[import-not-found]

    if value is None:
        return None
    if isinstance(value, String):
        return str(value)
    if isinstance(value, Boolean):
        return bool(value.booleanValue())
    if isinstance(value, Number):
        from java.lang import Double, Float  # type: ignore[import-not-found]

        if isinstance(value, Double | Float):
            return float(value.doubleValue())
        return int(value.longValue())
    if isinstance(value, jpype.JArray):
        return [from_java(v) for v in value]
    return value


def java_exception(exc: BaseException) -> Any:
    """The javax.management exception a JMX client sees for ``exc`` (message kept)."""
    from java.lang import (  # type: ignore[import-not-found]
        IllegalArgumentException,
        IllegalStateException,
        NoSuchMethodException,
        RuntimeException,
    )
    from javax.management import (  # type: ignore[import-not-found]
        AttributeNotFoundException,
        InvalidAttributeValueException,
        MBeanException,
        ReflectionException,
    )

    message = str(exc)
    if isinstance(exc, AttributeNotFound):
        return AttributeNotFoundException(message)
    if isinstance(exc, InvalidAttributeValue):
        return InvalidAttributeValueException(message)
    if isinstance(exc, OperationNotFound):
        return ReflectionException(NoSuchMethodException(message), message)
    if isinstance(exc, InvalidArgument):
        return MBeanException(IllegalArgumentException(message), message)
    if isinstance(exc, ManagementError):
        return MBeanException(IllegalStateException(message), message)
    log.error("JMX call failed", exc_info=exc)
    message = f"internal error: {type(exc).__name__}: {exc}"
    return MBeanException(RuntimeException(message), message)


def _mbean_class() -> type:
    """The DynamicMBean proxy class; defined once the JVM runs (JImplements needs it)."""
    global _MBEAN_CLASS
    if _MBEAN_CLASS is not None:
        return _MBEAN_CLASS
    import jpype
    from javax.management import (  # type: ignore[import-not-found]
        Attribute,
        AttributeList,
        MBeanAttributeInfo,
        MBeanConstructorInfo,
        MBeanInfo,
        MBeanNotificationInfo,
        MBeanOperationInfo,
        MBeanParameterInfo,
    )
    from jpype import JImplements, JOverride

    def mbean_info() -> Any:
        attributes = [MBeanAttributeInfo(a.name, a.java_type, a.description, True,
                                         a.writable, False) for a in ATTRIBUTES]
        operations = [
            MBeanOperationInfo(
                o.name, o.description,
                jpype.JArray(MBeanParameterInfo)([MBeanParameterInfo(p.name, p.java_type,
                                                                     p.description)
                                                  for p in o.params]),
                o.return_type,
                MBeanOperationInfo.ACTION if o.impact == "ACTION" else MBeanOperationInfo.INFO)
            for o in OPERATIONS]
        return MBeanInfo("txcluster.ClusterInfo", MBEAN_DESCRIPTION,
                         jpype.JArray(MBeanAttributeInfo)(attributes),
                         jpype.JArray(MBeanConstructorInfo)([]),
                         jpype.JArray(MBeanOperationInfo)(operations),
                         jpype.JArray(MBeanNotificationInfo)([]))

    info_cache: list[Any] = []

    @JImplements("javax.management.DynamicMBean")
    class ClusterInfoMBean:
        def __init__(self, bridge: JmxBridge) -> None:
            self.bridge = bridge
            self.info = bridge.info

        def _read(self, name: str) -> Any:
            attribute = self.info.attribute(name)
            value = self.bridge.run(self.info.read(name), ATTRIBUTE_TIMEOUT_S)
            return to_java(attribute.java_type, value)

        @JOverride
        def getAttribute(self, name: Any) -> Any:
            try:
                return self._read(str(name))
            except Exception as exc:  # only Java exceptions may leave (module docstring)
                raise java_exception(exc) from None

        @JOverride
        def setAttribute(self, attribute: Any) -> None:
            try:
                name, value = str(attribute.getName()), from_java(attribute.getValue())
                self.bridge.run(self.info.write(name, value), ATTRIBUTE_TIMEOUT_S)
            except Exception as exc:
                raise java_exception(exc) from None

        @JOverride
        def getAttributes(self, names: Any) -> Any:
            # The JMX contract: the attributes that could be read; the others are left out.
            result = AttributeList()
            for name in names:
                try:
                    result.add(Attribute(name, self._read(str(name))))
                except Exception as exc:
                    log.info("JMX getAttributes: %s: %s", name, exc)
            return result

        @JOverride
        def setAttributes(self, attributes: Any) -> Any:
            result = AttributeList()
            for attribute in attributes.asList():
                try:
                    name = str(attribute.getName())
                    self.bridge.run(self.info.write(name, from_java(attribute.getValue())),
                                    ATTRIBUTE_TIMEOUT_S)
                    result.add(Attribute(name, self._read(name)))
                except Exception as exc:
                    log.info("JMX setAttributes: %s", exc)
            return result

        @JOverride
        def invoke(self, action: Any, params: Any, signature: Any) -> Any:
            try:
                name = str(action)
                args = [from_java(p) for p in params] if params is not None else []
                sig = [str(s) for s in signature] if signature is not None else None
                op = self.info.operation(name, sig)
                value = self.bridge.run(self.info.invoke(name, args, sig), OPERATION_TIMEOUT_S)
                return None if op.return_type == "void" else to_java(op.return_type, value)
            except Exception as exc:
                raise java_exception(exc) from None

        @JOverride
        def getMBeanInfo(self) -> Any:
            if not info_cache:
                info_cache.append(mbean_info())
            return info_cache[0]

    _MBEAN_CLASS = ClusterInfoMBean
    return ClusterInfoMBean


_MBEAN_CLASS: type | None = None
