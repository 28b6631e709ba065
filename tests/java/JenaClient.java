import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Iterator;
import java.util.List;

import org.apache.jena.atlas.web.HttpException;
import org.apache.jena.graph.Node;
import org.apache.jena.graph.Triple;
import org.apache.jena.query.Dataset;
import org.apache.jena.query.QueryExecution;
import org.apache.jena.query.QuerySolution;
import org.apache.jena.query.ResultSet;
import org.apache.jena.rdf.model.Model;
import org.apache.jena.rdf.model.ModelFactory;
import org.apache.jena.rdf.model.RDFNode;
import org.apache.jena.rdfconnection.RDFConnection;
import org.apache.jena.rdfconnection.RDFConnectionRemote;
import org.apache.jena.riot.Lang;
import org.apache.jena.riot.RDFParser;
import org.apache.jena.sparql.core.Quad;
import org.apache.jena.sparql.exec.http.QueryExecutionHTTP;
import org.apache.jena.sparql.exec.http.QuerySendMode;
import org.apache.jena.sparql.exec.http.UpdateExecutionHTTP;
import org.apache.jena.sparql.exec.http.UpdateSendMode;
import org.apache.jena.sparql.engine.http.QueryExceptionHTTP;
import org.apache.jena.sparql.util.FmtUtils;

/**
 * Apache Jena 4 (Debian's libapache-jena-java) against an RDF4J-style repository: Jena's
 * RDFConnection, UpdateExecutionHTTP and QueryExecutionHTTP, all on Jena's default
 * java.net.http client (which offers {@code Upgrade: h2c} on cleartext HTTP/1.1).
 *
 * <p>{@code java JenaClient REPOSITORY_URL COMMAND...}, each COMMAND one argument whose
 * fields are separated by tabs:
 * <pre>
 * update TEXT                     RDFConnection.update
 * update-exec post|form TEXT      UpdateExecutionHTTP (application/sparql-update | form)
 * put GRAPH|default FILE          RDFConnection.put (Graph Store PUT of a file)
 * put-model GRAPH|default TURTLE  RDFConnection.put of a Model
 * load GRAPH|default FILE         RDFConnection.load (Graph Store POST)
 * delete GRAPH|default            RDFConnection.delete
 * fetch GRAPH|default             RDFConnection.fetch: TRIPLE lines
 * put-dataset FILE / load-dataset FILE / fetch-dataset
 *                                 the dataset operations, on /statements: QUAD lines
 * select QUERY                    RDFConnection.querySelect: ROW lines
 * select-exec get|post|form QUERY QueryExecutionHTTP with that send mode: ROW lines
 * ask QUERY                       ASK line
 * construct QUERY                 TRIPLE lines
 * </pre>
 * Output: {@code CMD name}, the result lines, then {@code OK} or
 * {@code ERR status message} (status -1 when not an HTTP error); values in N-Triples form,
 * rows and triples sorted.
 */
public final class JenaClient {
    private static PrintStream out;

    public static void main(String[] args) {
        out = new PrintStream(System.out, true, StandardCharsets.UTF_8);
        String repo = args[0];
        try (RDFConnection conn = RDFConnectionRemote.newBuilder()
                     .destination(repo)
                     .queryEndpoint("")
                     .updateEndpoint("statements")
                     .gspEndpoint("rdf-graphs/service")
                     .build();
             RDFConnection datasetConn = RDFConnectionRemote.newBuilder()
                     .destination(repo)
                     .queryEndpoint("")
                     .updateEndpoint("statements")
                     .gspEndpoint("statements")
                     .build()) {
            for (int i = 1; i < args.length; i++) {
                String[] f = args[i].split("\t", -1);
                out.println("CMD\t" + f[0]);
                try {
                    run(repo, conn, datasetConn, f);
                    out.println("OK");
                } catch (HttpException e) {
                    out.println("ERR\t" + e.getStatusCode() + "\t"
                            + oneLine(e.getResponse() != null ? e.getResponse() : e.getMessage()));
                } catch (QueryExceptionHTTP e) {
                    out.println("ERR\t" + e.getStatusCode() + "\t"
                            + oneLine(e.getResponse() != null ? e.getResponse() : e.getMessage()));
                } catch (RuntimeException e) {
                    out.println("ERR\t-1\t" + oneLine(e.toString()));
                }
            }
        }
    }

    private static String graph(String name) {
        return name.equals("default") ? null : name;
    }

    private static void run(String repo, RDFConnection conn, RDFConnection datasetConn,
                            String[] f) {
        switch (f[0]) {
            case "update" -> conn.update(f[1]);
            case "update-exec" -> UpdateExecutionHTTP.create()
                    .endpoint(repo + "/statements")
                    .sendMode(f[1].equals("form") ? UpdateSendMode.asPostForm
                                                  : UpdateSendMode.asPost)
                    .update(f[2])
                    .build()
                    .execute();
            case "put" -> {
                if (graph(f[1]) == null) {
                    conn.put(f[2]);
                } else {
                    conn.put(f[1], f[2]);
                }
            }
            case "put-model" -> {
                Model m = ModelFactory.createDefaultModel();
                RDFParser.fromString(f[2]).lang(Lang.TURTLE).parse(m);
                if (graph(f[1]) == null) {
                    conn.put(m);
                } else {
                    conn.put(f[1], m);
                }
            }
            case "load" -> {
                if (graph(f[1]) == null) {
                    conn.load(f[2]);
                } else {
                    conn.load(f[1], f[2]);
                }
            }
            case "delete" -> {
                if (graph(f[1]) == null) {
                    conn.delete();
                } else {
                    conn.delete(f[1]);
                }
            }
            case "fetch" -> printModel(graph(f[1]) == null ? conn.fetch() : conn.fetch(f[1]));
            case "put-dataset" -> datasetConn.putDataset(f[1]);
            case "load-dataset" -> datasetConn.loadDataset(f[1]);
            case "fetch-dataset" -> printDataset(datasetConn.fetchDataset());
            case "select" -> {
                List<String> rows = new ArrayList<>();
                conn.querySelect(f[1], s -> rows.add(row(s)));
                printSorted("ROW", rows);
            }
            case "select-exec" -> {
                QuerySendMode mode = switch (f[1]) {
                    case "get" -> QuerySendMode.asGetAlways;
                    case "post" -> QuerySendMode.asPost;
                    default -> QuerySendMode.asPostForm;
                };
                try (QueryExecution qe = QueryExecutionHTTP.create().endpoint(repo)
                        .sendMode(mode).query(f[2]).build()) {
                    ResultSet rs = qe.execSelect();
                    List<String> rows = new ArrayList<>();
                    while (rs.hasNext()) {
                        rows.add(row(rs.next()));
                    }
                    printSorted("ROW", rows);
                }
            }
            case "ask" -> out.println("ASK\t" + conn.queryAsk(f[1]));
            case "construct" -> printModel(conn.queryConstruct(f[1]));
            default -> throw new IllegalArgumentException("unknown command " + f[0]);
        }
    }

    private static String row(QuerySolution s) {
        List<String> cells = new ArrayList<>();
        for (Iterator<String> it = s.varNames(); it.hasNext(); ) {
            String v = it.next();
            RDFNode n = s.get(v);
            cells.add(v + "=" + FmtUtils.stringForNode(n.asNode()));
        }
        Collections.sort(cells);
        return String.join("\t", cells);
    }

    private static String term(Node n) {
        return FmtUtils.stringForNode(n);
    }

    private static void printModel(Model m) {
        List<String> lines = new ArrayList<>();
        for (Iterator<Triple> it = m.getGraph().find(); it.hasNext(); ) {
            Triple t = it.next();
            lines.add(term(t.getSubject()) + " " + term(t.getPredicate()) + " "
                    + term(t.getObject()) + " .");
        }
        printSorted("TRIPLE", lines);
    }

    private static void printDataset(Dataset ds) {
        List<String> lines = new ArrayList<>();
        for (Iterator<Quad> it = ds.asDatasetGraph().find(); it.hasNext(); ) {
            Quad q = it.next();
            String g = q.isDefaultGraph() ? "" : " " + term(q.getGraph());
            lines.add(term(q.getSubject()) + " " + term(q.getPredicate()) + " "
                    + term(q.getObject()) + g + " .");
        }
        printSorted("QUAD", lines);
    }

    private static void printSorted(String tag, List<String> lines) {
        Collections.sort(lines);
        for (String l : lines) {
            out.println(tag + "\t" + l);
        }
    }

    private static String oneLine(String s) {
        return s == null ? "" : s.replace('\n', ' ').replace('\r', ' ').replace('\t', ' ');
    }
}
