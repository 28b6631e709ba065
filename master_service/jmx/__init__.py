"""The master's management interface: the ReplicationCluster ClusterInfo MBean.

- ``attributes``: the MBean's attributes and operations as a plain table (names, Java
  types, descriptions, which cluster.properties key) over the control plane (``Control``);
  importable without jpype (the docs' JMX reference is generated from it).
- ``clusterinfo``: the one Python object serving that table on the master's asyncio loop;
  both the JVM bridge and the Jolokia handler call it.
- ``bridge``: the in-process JVM (jpype), the DynamicMBean and remote JMX (extra ``jmx``).
- ``jolokia``: the Jolokia HTTP protocol at ``/jolokia`` (works without the JVM).
"""


def jmx_service_url(host: str, port: int) -> str:
    """A master's remote JMX address (what jconsole and JMXConnectorFactory connect to;
    also `jconsole HOST:PORT`)."""
    return f"service:jmx:rmi:///jndi/rmi://{host}:{port}/jmxrmi"
