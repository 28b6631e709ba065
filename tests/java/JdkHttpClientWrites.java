import java.io.BufferedReader;
import java.io.ByteArrayInputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Base64;
import java.util.List;
import java.util.Map;

/**
 * The JDK's own HTTP client (java.net.http) with its defaults, driven line by line.
 *
 * <p>{@code HttpClient.newHttpClient()} prefers HTTP/2, so on an http: URI its first request
 * on a connection offers {@code Upgrade: h2c} over HTTP/1.1 (with its body). That is the
 * client this program is: nothing is configured but what a line asks for.
 *
 * <p>Standard input, one command a line, fields separated by tabs:
 * <pre>
 * NEW                                  a new HttpClient.newHttpClient() (a new connection)
 * REQ METHOD URL BODY FLAGS [Name: value]...
 *     BODY:  -            no body (BodyPublishers.noBody())
 *            b64:DATA     these bytes, with a Content-Length (ofByteArray)
 *            file:PATH    the file's bytes, with a Content-Length (ofByteArray)
 *            chunked-b64:DATA / chunked-file:PATH
 *                         the same bytes from an InputStream: no length, so the client
 *                         sends them with Transfer-Encoding: chunked (ofInputStream)
 *     FLAGS: - or a comma-separated list; expect100: HttpRequest.Builder.expectContinue(true)
 * </pre>
 * Standard output, one line per REQ: {@code RES status version base64(body) base64(headers)}
 * (headers as "name: value" lines), or {@code ERR base64(exception)}; one line {@code OK}
 * per NEW.
 */
public final class JdkHttpClientWrites {
    private static final Base64.Encoder B64 = Base64.getEncoder();

    public static void main(String[] args) throws Exception {
        PrintStream out = new PrintStream(System.out, true, StandardCharsets.UTF_8);
        BufferedReader in = new BufferedReader(
                new InputStreamReader(System.in, StandardCharsets.UTF_8));
        HttpClient client = HttpClient.newHttpClient();
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isEmpty()) {
                continue;
            }
            String[] f = line.split("\t", -1);
            if (f[0].equals("NEW")) {
                client = HttpClient.newHttpClient();
                out.println("OK");
                continue;
            }
            if (!f[0].equals("REQ") || f.length < 5) {
                out.println("ERR " + b64("bad command: " + line));
                continue;
            }
            try {
                HttpRequest request = request(f);
                HttpResponse<byte[]> r = client.send(request,
                        HttpResponse.BodyHandlers.ofByteArray());
                StringBuilder headers = new StringBuilder();
                for (Map.Entry<String, List<String>> h : r.headers().map().entrySet()) {
                    for (String v : h.getValue()) {
                        headers.append(h.getKey()).append(": ").append(v).append('\n');
                    }
                }
                out.println("RES\t" + r.statusCode() + "\t" + r.version() + "\t"
                        + B64.encodeToString(r.body()) + "\t" + b64(headers.toString()));
            } catch (Exception e) {
                out.println("ERR\t" + b64(e.toString()));
            }
        }
    }

    private static HttpRequest request(String[] f) throws Exception {
        String method = f[1];
        HttpRequest.Builder b = HttpRequest.newBuilder(URI.create(f[2]))
                .timeout(Duration.ofSeconds(120));
        for (String flag : f[4].split(",")) {
            if (flag.equals("expect100")) {
                b.expectContinue(true);
            }
        }
        for (int i = 5; i < f.length; i++) {
            int colon = f[i].indexOf(':');
            b.header(f[i].substring(0, colon).trim(), f[i].substring(colon + 1).trim());
        }
        return b.method(method, body(f[3])).build();
    }

    private static HttpRequest.BodyPublisher body(String spec) throws Exception {
        if (spec.equals("-")) {
            return HttpRequest.BodyPublishers.noBody();
        }
        boolean chunked = spec.startsWith("chunked-");
        String s = chunked ? spec.substring("chunked-".length()) : spec;
        byte[] bytes;
        if (s.startsWith("b64:")) {
            bytes = Base64.getDecoder().decode(s.substring(4));
        } else if (s.startsWith("file:")) {
            bytes = Files.readAllBytes(Path.of(s.substring(5)));
        } else {
            throw new IllegalArgumentException("bad body: " + spec);
        }
        if (chunked) {
            return HttpRequest.BodyPublishers.ofInputStream(() -> new ByteArrayInputStream(bytes));
        }
        return HttpRequest.BodyPublishers.ofByteArray(bytes);
    }

    private static String b64(String text) {
        return B64.encodeToString(text.getBytes(StandardCharsets.UTF_8));
    }
}
