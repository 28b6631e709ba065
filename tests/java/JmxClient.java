// A plain JMX client (javax.management.remote only), compiled by javac in tests/test_jmx.py.
//
// usage: java JmxClient SERVICE_URL OBJECT_NAME USER PASSWORD COMMAND...
//   USER "-": no credentials. Each COMMAND is one argument, its fields separated by tabs:
//   info | getall | get<TAB>Attr | set<TAB>Attr<TAB>value | invoke<TAB>op<TAB>arg... |
//   sleep<TAB>seconds
//   Values and arguments are converted to the types the MBeanInfo declares.
// Output, one tab-separated line per result:
//   ATTR name type rw description | OP name returnType p1:type,p2:type description
//   OK command value-as-JSON | ERROR command exceptionClass message causeClass
// A failed connection prints CONNECT-ERROR class: message and exits 3.
// -Dtxcluster.ssl=true (with javax.net.ssl.trustStore...): connect over TLS.
import java.util.HashMap;
import java.util.Map;
import javax.management.Attribute;
import javax.management.MBeanAttributeInfo;
import javax.management.MBeanInfo;
import javax.management.MBeanOperationInfo;
import javax.management.MBeanParameterInfo;
import javax.management.MBeanServerConnection;
import javax.management.ObjectName;
import javax.management.remote.JMXConnector;
import javax.management.remote.JMXConnectorFactory;
import javax.management.remote.JMXServiceURL;
import javax.rmi.ssl.SslRMIClientSocketFactory;

public class JmxClient {
    public static void main(String[] args) throws Exception {
        Map<String, Object> env = new HashMap<>();
        if (!args[2].equals("-")) {
            env.put(JMXConnector.CREDENTIALS, new String[] {args[2], args[3]});
        }
        if (Boolean.getBoolean("txcluster.ssl")) {
            // The agent's registry speaks TLS too (com.sun.management.jmxremote.registry.ssl).
            env.put("com.sun.jndi.rmi.factory.socket", new SslRMIClientSocketFactory());
        }
        JMXConnector connector;
        try {
            connector = JMXConnectorFactory.connect(new JMXServiceURL(args[0]), env);
        } catch (Exception e) {
            System.out.println("CONNECT-ERROR " + e.getClass().getName() + ": " + e.getMessage());
            System.exit(3);
            return;
        }
        MBeanServerConnection server = connector.getMBeanServerConnection();
        ObjectName name = new ObjectName(args[1]);
        MBeanInfo info = server.getMBeanInfo(name);
        for (int i = 4; i < args.length; i++) {
            String command = args[i];
            String shown = command.replace('\t', ' ');
            try {
                run(server, name, info, command.split("\t", -1), shown);
            } catch (Exception e) {
                Throwable cause = e.getCause();
                System.out.println("ERROR\t" + shown + "\t" + e.getClass().getName() + "\t"
                        + e.getMessage() + "\t" + (cause == null ? "-" : cause.getClass().getName()));
            }
            System.out.flush();
        }
        connector.close();
    }

    static void run(MBeanServerConnection server, ObjectName name, MBeanInfo info, String[] f,
                    String shown) throws Exception {
        switch (f[0]) {
            case "info":
                for (MBeanAttributeInfo a : info.getAttributes()) {
                    System.out.println("ATTR\t" + a.getName() + "\t" + a.getType() + "\t"
                            + (a.isWritable() ? "rw" : "r") + "\t" + a.getDescription());
                }
                for (MBeanOperationInfo o : info.getOperations()) {
                    StringBuilder params = new StringBuilder();
                    for (MBeanParameterInfo p : o.getSignature()) {
                        if (params.length() > 0) params.append(",");
                        params.append(p.getName()).append(":").append(p.getType());
                    }
                    System.out.println("OP\t" + o.getName() + "\t" + o.getReturnType() + "\t"
                            + params + "\t" + o.getDescription());
                }
                return;
            case "getall":
                for (MBeanAttributeInfo a : info.getAttributes()) {
                    System.out.println("OK\tget " + a.getName() + "\t"
                            + json(server.getAttribute(name, a.getName())));
                }
                return;
            case "get":
                System.out.println("OK\t" + shown + "\t" + json(server.getAttribute(name, f[1])));
                return;
            case "set":
                String type = null;
                for (MBeanAttributeInfo a : info.getAttributes()) {
                    if (a.getName().equals(f[1])) type = a.getType();
                }
                server.setAttribute(name, new Attribute(f[1], convert(type == null ? "java.lang.String" : type, f[2])));
                System.out.println("OK\t" + shown + "\tnull");
                return;
            case "invoke":
                for (MBeanOperationInfo o : info.getOperations()) {
                    if (!o.getName().equals(f[1])) continue;
                    MBeanParameterInfo[] sig = o.getSignature();
                    Object[] values = new Object[sig.length];
                    String[] types = new String[sig.length];
                    for (int i = 0; i < sig.length; i++) {
                        types[i] = sig[i].getType();
                        values[i] = convert(types[i], f[2 + i]);
                    }
                    System.out.println("OK\t" + shown + "\t" + json(server.invoke(name, f[1], values, types)));
                    return;
                }
                throw new IllegalArgumentException("no operation " + f[1] + " in MBeanInfo");
            case "sleep":  // stay connected (the shutdown test)
                Thread.sleep(Long.parseLong(f[1]) * 1000);
                return;
            default:
                throw new IllegalArgumentException("unknown command " + f[0]);
        }
    }

    static Object convert(String type, String text) {
        switch (type) {
            case "long": return Long.valueOf(text);
            case "int": return Integer.valueOf(text);
            case "double": return Double.valueOf(text);
            case "boolean": return Boolean.valueOf(text);
            default: return text;
        }
    }

    static String json(Object value) {
        if (value == null) return "null";
        if (value instanceof String[]) {
            StringBuilder b = new StringBuilder("[");
            for (String s : (String[]) value) {
                if (b.length() > 1) b.append(",");
                b.append(json(s));
            }
            return b.append("]").toString();
        }
        if (value instanceof String) {
            StringBuilder b = new StringBuilder("\"");
            for (char c : ((String) value).toCharArray()) {
                if (c == '"' || c == '\\') b.append('\\').append(c);
                else if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
                else b.append(c);
            }
            return b.append("\"").toString();
        }
        return value.toString();  // Long, Integer, Double, Boolean: JSON as they print
    }
}
