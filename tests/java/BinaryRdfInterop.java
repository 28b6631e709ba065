// Converts between text formats and RDF4J's binary formats with RDF4J's own Rio codecs
// (Debian's librdf4j-java), for tests/test_binary_rdf.py. Reads stdin, writes stdout.
//
//   nquads-to-brdf [ns:PREFIX=IRI | comment:TEXT ...]   N-Quads -> Binary RDF (BinaryRDFWriter);
//                       the namespace declarations and comments are written first, in order
//   brdf-to-nquads                                       Binary RDF (BinaryRDFParser) -> N-Quads,
//                       preceded by "# ns\tPREFIX\tIRI" and "# comment\tTEXT" lines for the
//                       declarations and comments read (text escaped: \\ \n \r \t)
//   json-to-brtr                                         SPARQL JSON results -> binary table
//   brtr-to-json                                         binary table -> SPARQL JSON results
//
// Blank node ids are preserved in both directions. Any failure: exit status 2, the message
// on stderr.

import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.OutputStreamWriter;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

import org.eclipse.rdf4j.model.Statement;
import org.eclipse.rdf4j.query.resultio.binary.BinaryQueryResultParser;
import org.eclipse.rdf4j.query.resultio.binary.BinaryQueryResultWriter;
import org.eclipse.rdf4j.query.resultio.sparqljson.SPARQLResultsJSONParser;
import org.eclipse.rdf4j.query.resultio.sparqljson.SPARQLResultsJSONWriter;
import org.eclipse.rdf4j.rio.RDFParser;
import org.eclipse.rdf4j.rio.RDFWriter;
import org.eclipse.rdf4j.rio.binary.BinaryRDFParser;
import org.eclipse.rdf4j.rio.binary.BinaryRDFWriter;
import org.eclipse.rdf4j.rio.helpers.AbstractRDFHandler;
import org.eclipse.rdf4j.rio.helpers.BasicParserSettings;
import org.eclipse.rdf4j.rio.nquads.NQuadsParser;
import org.eclipse.rdf4j.rio.nquads.NQuadsWriter;

public class BinaryRdfInterop {

    /** Everything a parser reports, in order. */
    static final class Recorder extends AbstractRDFHandler {
        final List<String[]> namespaces = new ArrayList<>();
        final List<String> comments = new ArrayList<>();
        final List<Statement> statements = new ArrayList<>();

        @Override
        public void handleNamespace(String prefix, String iri) {
            namespaces.add(new String[] {prefix, iri});
        }

        @Override
        public void handleComment(String comment) {
            comments.add(comment);
        }

        @Override
        public void handleStatement(Statement st) {
            statements.add(st);
        }
    }

    static String escape(String s) {
        return s.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
                .replace("\t", "\\t");
    }

    static Recorder parse(RDFParser parser, InputStream in) throws Exception {
        parser.getParserConfig().set(BasicParserSettings.PRESERVE_BNODE_IDS, true);
        Recorder recorder = new Recorder();
        parser.setRDFHandler(recorder);
        parser.parse(in, "urn:x-base:");
        return recorder;
    }

    public static void main(String[] args) throws Exception {
        InputStream in = new BufferedInputStream(System.in);
        OutputStream out = new BufferedOutputStream(System.out);
        try {
            switch (args[0]) {
                case "nquads-to-brdf": {
                    Recorder doc = parse(new NQuadsParser(), in);
                    RDFWriter writer = new BinaryRDFWriter(out);
                    writer.startRDF();
                    for (int i = 1; i < args.length; i++) {
                        if (args[i].startsWith("ns:")) {
                            String decl = args[i].substring(3);
                            int eq = decl.indexOf('=');
                            writer.handleNamespace(decl.substring(0, eq), decl.substring(eq + 1));
                        } else if (args[i].startsWith("comment:")) {
                            writer.handleComment(args[i].substring(8));
                        }
                    }
                    for (Statement st : doc.statements) {
                        writer.handleStatement(st);
                    }
                    writer.endRDF();
                    break;
                }
                case "brdf-to-nquads": {
                    Recorder doc = parse(new BinaryRDFParser(), in);
                    Writer text = new OutputStreamWriter(out, StandardCharsets.UTF_8);
                    for (String[] ns : doc.namespaces) {
                        text.write("# ns\t" + escape(ns[0]) + "\t" + escape(ns[1]) + "\n");
                    }
                    for (String comment : doc.comments) {
                        text.write("# comment\t" + escape(comment) + "\n");
                    }
                    RDFWriter writer = new NQuadsWriter(text);
                    writer.startRDF();
                    for (Statement st : doc.statements) {
                        writer.handleStatement(st);
                    }
                    writer.endRDF();
                    text.flush();
                    break;
                }
                case "json-to-brtr": {
                    SPARQLResultsJSONParser parser = new SPARQLResultsJSONParser();
                    parser.setQueryResultHandler(new BinaryQueryResultWriter(out));
                    parser.parseQueryResult(in);
                    break;
                }
                case "brtr-to-json": {
                    BinaryQueryResultParser parser = new BinaryQueryResultParser();
                    parser.setQueryResultHandler(new SPARQLResultsJSONWriter(out));
                    parser.parseQueryResult(in);
                    break;
                }
                default:
                    throw new IllegalArgumentException("unknown command " + args[0]);
            }
            out.flush();
        } catch (Exception e) {
            System.err.println(e);
            System.exit(2);
        }
    }
}
