// Speaks the RDF4J REST protocol as RDF4J's HTTPRepository does (RDF4J 3.x/4.x), with
// RDF4J's Rio codecs (Debian's librdf4j-java) and the JDK's java.net.http.HttpClient with
// its defaults: RDF4J's own HTTPRepository jar is not packaged by Debian. For
// tests/test_binary_rdf_protocol.py.
//
//   java Rdf4jHttpClient COMMAND REPOSITORY_URL ARGS...
//
//   add FILE [CONTEXT...]      POST /statements?preserveNodeId=true, the N-Quads FILE as
//                              Binary RDF (HTTPRepositoryConnection.addModel outside a
//                              transaction); CONTEXT: N-Triples encoded, or null
//   replace FILE [CONTEXT...]  PUT /statements: the N-Quads FILE as Binary RDF
//   statements [PARAM=VALUE...] GET /statements (subj, pred, obj, context) with RDF4J's Accept
//                              (Binary RDF preferred); prints "# content-type: T" and the
//                              statements parsed by Rio as N-Quads
//   select QUERY               POST the query (form), Accept: RDF4J's tuple formats (binary
//                              table preferred); prints "# content-type: T" and the result
//                              parsed by Rio, as SPARQL JSON
//   construct QUERY            the same for a graph query; the statements as N-Quads
//   tuple PATH                 GET REPOSITORY_URL/PATH (contexts, namespaces) as a tuple
//                              result, printed as select prints it
//   transaction SCRIPT         POST /transactions, then the SCRIPT's lines (tab separated):
//                                add <N-Quads statement>
//                                remove S P O [CONTEXT...]   (S, P, O: N-Triples or * for
//                                                              null; CONTEXT: N-Triples or null)
//                                commit | rollback
//                              buffered and flushed as HTTPRepositoryConnection does: adds and
//                              removes are collected in models, sent as Binary RDF with
//                              PUT ?action=ADD / ?action=DELETE (&preserveNodeId=true) when
//                              the other kind comes or at commit; in a removal a null
//                              subject/predicate/object is sesame:wildcard and a null context
//                              rdf4j:nil (RDF4J 4.1.1+, GH-4126). Prints "ACTION STATUS" per
//                              request.
//
// A response that is not 2xx: "HTTP STATUS BODY" on stdout and exit status 3; any other
// failure: exit status 2.

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.OutputStreamWriter;
import java.io.PrintStream;
import java.io.StringReader;
import java.io.Writer;
import java.net.URI;
import java.net.URLEncoder;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

import org.eclipse.rdf4j.model.IRI;
import org.eclipse.rdf4j.model.Model;
import org.eclipse.rdf4j.model.Resource;
import org.eclipse.rdf4j.model.Statement;
import org.eclipse.rdf4j.model.Value;
import org.eclipse.rdf4j.model.ValueFactory;
import org.eclipse.rdf4j.model.impl.LinkedHashModel;
import org.eclipse.rdf4j.model.impl.SimpleValueFactory;
import org.eclipse.rdf4j.model.vocabulary.RDF4J;
import org.eclipse.rdf4j.model.vocabulary.SESAME;
import org.eclipse.rdf4j.query.resultio.QueryResultFormat;
import org.eclipse.rdf4j.query.resultio.QueryResultIO;
import org.eclipse.rdf4j.query.resultio.TupleQueryResultFormat;
import org.eclipse.rdf4j.query.resultio.TupleQueryResultParser;
import org.eclipse.rdf4j.query.resultio.TupleQueryResultParserRegistry;
import org.eclipse.rdf4j.query.resultio.sparqljson.SPARQLResultsJSONWriter;
import org.eclipse.rdf4j.rio.RDFFormat;
import org.eclipse.rdf4j.rio.RDFParser;
import org.eclipse.rdf4j.rio.RDFParserRegistry;
import org.eclipse.rdf4j.rio.RDFWriter;
import org.eclipse.rdf4j.rio.Rio;
import org.eclipse.rdf4j.rio.helpers.BasicParserSettings;
import org.eclipse.rdf4j.rio.helpers.NTriplesUtil;
import org.eclipse.rdf4j.rio.helpers.StatementCollector;
import org.eclipse.rdf4j.rio.nquads.NQuadsParser;
import org.eclipse.rdf4j.rio.nquads.NQuadsWriter;

public class Rdf4jHttpClient {

    static final ValueFactory VF = SimpleValueFactory.getInstance();
    static final HttpClient HTTP = HttpClient.newHttpClient();
    static final PrintStream OUT = new PrintStream(System.out, true, StandardCharsets.UTF_8);

    static final class HttpFailure extends Exception {
        HttpFailure(int status, String body) {
            super("HTTP " + status + " " + body);
        }
    }

    // ---- helpers ----

    static String enc(String s) {
        return URLEncoder.encode(s, StandardCharsets.UTF_8);
    }

    static String query(List<String[]> params) {
        StringBuilder b = new StringBuilder();
        for (String[] p : params) {
            b.append(b.length() == 0 ? "?" : "&").append(enc(p[0])).append('=').append(enc(p[1]));
        }
        return b.toString();
    }

    static HttpResponse<byte[]> send(HttpRequest request) throws Exception {
        HttpResponse<byte[]> response = HTTP.send(request, HttpResponse.BodyHandlers.ofByteArray());
        if (response.statusCode() / 100 != 2) {
            throw new HttpFailure(response.statusCode(),
                    new String(response.body(), StandardCharsets.UTF_8));
        }
        return response;
    }

    static String contentType(HttpResponse<?> response) {
        String ct = response.headers().firstValue("Content-Type").orElse("");
        int semi = ct.indexOf(';');
        return (semi < 0 ? ct : ct.substring(0, semi)).trim();
    }

    /** The Accept of RDF4J's getRDF(): every registered parser, Binary RDF preferred. */
    static String rdfAccept() {
        return String.join(", ", RDFFormat.getAcceptParams(
                RDFParserRegistry.getInstance().getKeys(), true, RDFFormat.BINARY));
    }

    /** The Accept of RDF4J's sendTupleQueryViaHttp(): the binary table preferred. */
    static String tupleAccept() {
        List<String> values = new ArrayList<>();
        for (QueryResultFormat format : TupleQueryResultParserRegistry.getInstance().getKeys()) {
            int q = format.equals(TupleQueryResultFormat.BINARY) ? 10 : 8;
            for (String mime : format.getMIMETypes()) {
                values.add(q < 10 ? mime + ";q=0." + q : mime);
            }
        }
        return String.join(", ", values);
    }

    static Model readNQuads(String text) throws Exception {
        RDFParser parser = new NQuadsParser();
        parser.getParserConfig().set(BasicParserSettings.PRESERVE_BNODE_IDS, true);
        Model model = new LinkedHashModel();
        parser.setRDFHandler(new StatementCollector(model));
        parser.parse(new StringReader(text), "");
        return model;
    }

    static byte[] binary(Model model) {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        Rio.write(model, out, RDFFormat.BINARY);
        return out.toByteArray();
    }

    static Resource context(String encoded) {
        return "null".equals(encoded) ? null : NTriplesUtil.parseResource(encoded, VF);
    }

    static void printStatements(HttpResponse<byte[]> response) throws Exception {
        String type = contentType(response);
        RDFFormat format = Rio.getParserFormatForMIMEType(type)
                .orElseThrow(() -> new IllegalStateException("no parser for " + type));
        RDFParser parser = Rio.createParser(format);
        parser.getParserConfig().set(BasicParserSettings.PRESERVE_BNODE_IDS, true);
        Model model = new LinkedHashModel();
        parser.setRDFHandler(new StatementCollector(model));
        parser.parse(new ByteArrayInputStream(response.body()), "");
        OUT.println("# content-type: " + type);
        Writer text = new OutputStreamWriter(OUT, StandardCharsets.UTF_8);
        RDFWriter writer = new NQuadsWriter(text);
        writer.startRDF();
        for (Statement st : model) {
            writer.handleStatement(st);
        }
        writer.endRDF();
        text.flush();
    }

    static void printTuples(HttpResponse<byte[]> response) throws Exception {
        String type = contentType(response);
        QueryResultFormat format = QueryResultIO.getParserFormatForMIMEType(type)
                .orElseThrow(() -> new IllegalStateException("no parser for " + type));
        TupleQueryResultParser parser = QueryResultIO.createTupleParser(format);
        ByteArrayOutputStream json = new ByteArrayOutputStream();
        parser.setQueryResultHandler(new SPARQLResultsJSONWriter(json));
        parser.parseQueryResult(new ByteArrayInputStream(response.body()));
        OUT.println("# content-type: " + type);
        OUT.println(json.toString(StandardCharsets.UTF_8));
    }

    // ---- an HTTPRepositoryConnection's transaction ----

    static final class Transaction {
        final String location;
        Model toAdd;
        Model toRemove;

        Transaction(String repository) throws Exception {
            HttpResponse<byte[]> r = send(HttpRequest.newBuilder(
                    URI.create(repository + "/transactions"))
                    .POST(HttpRequest.BodyPublishers.noBody()).build());
            location = r.headers().firstValue("Location").orElseThrow();
            OUT.println("BEGIN " + r.statusCode());
        }

        void action(String action, byte[] body) throws Exception {
            String params = action.equals("ADD") || action.equals("DELETE")
                    ? "?preserveNodeId=true&action=" + action : "?action=" + action;
            HttpRequest.Builder b = HttpRequest.newBuilder(URI.create(location + params));
            if (body != null) {
                b.header("Content-Type", RDFFormat.BINARY.getDefaultMIMEType())
                        .PUT(HttpRequest.BodyPublishers.ofByteArray(body));
            } else {
                b.PUT(HttpRequest.BodyPublishers.noBody());
            }
            OUT.println(action + " " + send(b.build()).statusCode());
        }

        void flushAdds() throws Exception {
            if (toAdd != null) {
                action("ADD", binary(toAdd));
                toAdd = null;
            }
        }

        void flushRemoves() throws Exception {
            if (toRemove != null) {
                action("DELETE", binary(toRemove));
                toRemove = null;
            }
        }

        void add(Statement st) throws Exception {
            flushRemoves();
            if (toAdd == null) {
                toAdd = new LinkedHashModel();
            }
            toAdd.add(st);
        }

        void remove(Resource s, IRI p, Value o, Resource... contexts) throws Exception {
            flushAdds();
            if (toRemove == null) {
                toRemove = new LinkedHashModel();
            }
            s = s == null ? SESAME.WILDCARD : s;
            p = p == null ? SESAME.WILDCARD : p;
            o = o == null ? SESAME.WILDCARD : o;
            if (contexts.length == 0) {
                toRemove.add(s, p, o);
            } else {
                Resource[] copy = Arrays.copyOf(contexts, contexts.length);
                for (int i = 0; i < copy.length; i++) {
                    if (copy[i] == null) {
                        copy[i] = RDF4J.NIL;
                    }
                }
                toRemove.add(s, p, o, copy);
            }
        }

        void commit() throws Exception {
            flushAdds();
            flushRemoves();
            action("COMMIT", null);
        }
    }

    static void transaction(String repository, List<String> script) throws Exception {
        Transaction tx = new Transaction(repository);
        for (String line : script) {
            if (line.isBlank()) {
                continue;
            }
            String[] f = line.split("\t");
            switch (f[0]) {
                case "add":
                    for (Statement st : readNQuads(f[1] + "\n")) {
                        tx.add(st);
                    }
                    break;
                case "remove": {
                    Resource s = f[1].equals("*") ? null : NTriplesUtil.parseResource(f[1], VF);
                    IRI p = f[2].equals("*") ? null : NTriplesUtil.parseURI(f[2], VF);
                    Value o = f[3].equals("*") ? null : NTriplesUtil.parseValue(f[3], VF);
                    Resource[] contexts = new Resource[f.length - 4];
                    for (int i = 4; i < f.length; i++) {
                        contexts[i - 4] = context(f[i]);
                    }
                    tx.remove(s, p, o, contexts);
                    break;
                }
                case "commit":
                    tx.commit();
                    break;
                case "rollback":
                    tx.toAdd = tx.toRemove = null;
                    tx.action("ROLLBACK", null);
                    break;
                default:
                    throw new IllegalArgumentException("unknown script line: " + line);
            }
        }
    }

    public static void main(String[] args) throws Exception {
        String command = args[0];
        String repository = args[1];
        try {
            switch (command) {
                case "add":
                case "replace": {
                    Model model = readNQuads(Files.readString(Path.of(args[2])));
                    List<String[]> params = new ArrayList<>();
                    for (int i = 3; i < args.length; i++) {
                        params.add(new String[] {"context", args[i]});
                    }
                    if (command.equals("add")) {
                        params.add(new String[] {"preserveNodeId", "true"});
                    }
                    HttpRequest.BodyPublisher body = HttpRequest.BodyPublishers.ofByteArray(binary(model));
                    HttpRequest.Builder b = HttpRequest.newBuilder(
                            URI.create(repository + "/statements" + query(params)))
                            .header("Content-Type", RDFFormat.BINARY.getDefaultMIMEType());
                    b = command.equals("add") ? b.POST(body) : b.PUT(body);
                    OUT.println(command.toUpperCase() + " " + send(b.build()).statusCode());
                    break;
                }
                case "statements": {
                    List<String[]> params = new ArrayList<>();
                    for (int i = 2; i < args.length; i++) {
                        int eq = args[i].indexOf('=');
                        params.add(new String[] {args[i].substring(0, eq), args[i].substring(eq + 1)});
                    }
                    printStatements(send(HttpRequest.newBuilder(
                            URI.create(repository + "/statements" + query(params)))
                            .header("Accept", rdfAccept()).GET().build()));
                    break;
                }
                case "select":
                case "construct": {
                    String form = "queryLn=SPARQL&query=" + enc(args[2]) + "&infer=true";
                    HttpRequest request = HttpRequest.newBuilder(URI.create(repository))
                            .header("Content-Type", "application/x-www-form-urlencoded; charset=utf-8")
                            .header("Accept", command.equals("select") ? tupleAccept() : rdfAccept())
                            .POST(HttpRequest.BodyPublishers.ofString(form)).build();
                    HttpResponse<byte[]> response = send(request);
                    if (command.equals("select")) {
                        printTuples(response);
                    } else {
                        printStatements(response);
                    }
                    break;
                }
                case "tuple":
                    printTuples(send(HttpRequest.newBuilder(URI.create(repository + "/" + args[2]))
                            .header("Accept", tupleAccept()).GET().build()));
                    break;
                case "transaction":
                    transaction(repository, Files.readAllLines(Path.of(args[2])));
                    break;
                default:
                    throw new IllegalArgumentException("unknown command " + command);
            }
        } catch (HttpFailure e) {
            OUT.println(e.getMessage());
            System.exit(3);
        } catch (Exception e) {
            e.printStackTrace();
            System.exit(2);
        }
    }
}
