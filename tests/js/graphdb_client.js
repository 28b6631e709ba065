'use strict';
/*
 * Ontotext's graphdb.js (npm `graphdb`, v3) against an RDF4J endpoint, used as its README
 * shows: ServerClient, RDFRepositoryClient, TransactionalRepositoryClient.
 *
 *   node graphdb_client.js SERVER_URL REPOSITORY_ID STEP...
 *
 * Each STEP runs in order (a failed step does not stop the next) and prints one JSON line:
 *   {"step": NAME, "ok": true, "value": ...}
 *   {"step": NAME, "ok": false, "status": HTTP status or null, "error": message,
 *    "body": the server's answer}
 * Steps that read print plain values (strings in N-Triples form, sorted), so the Python
 * test compares them exactly. tests/test_clients_graphdbjs.py runs it; `make test`
 * installs graphdb.js into .venv/node (NODE_PATH).
 */

const {ServerClient, ServerClientConfig} = require('graphdb').server;
const {RDFRepositoryClient, RepositoryClientConfig, AddStatementPayload,
  GetStatementsPayload} = require('graphdb').repository;
const {GetQueryPayload, UpdateQueryPayload, QueryType} = require('graphdb').query;
const {RDFMimeType, QueryContentType} = require('graphdb').http;
const {SparqlJsonResultParser} = require('graphdb').parser;
const {DataFactory} = require('n3');
const {Readable} = require('stream');

const [serverUrl, repositoryId, ...steps] = process.argv.slice(2);
const EX = 'http://example.org/';
const TIMEOUT = 30000;

function repositoryConfig() {
  return new RepositoryClientConfig(serverUrl)
      .setEndpoints([`${serverUrl}/repositories/${repositoryId}`])
      .setReadTimeout(TIMEOUT)
      .setWriteTimeout(TIMEOUT);
}

const repository = new RDFRepositoryClient(repositoryConfig());
repository.registerParser(new SparqlJsonResultParser());
let transaction = null;

// ---- turning answers into plain, comparable values ----

function term(t) {
  if (t.termType === 'NamedNode') return `<${t.value}>`;
  if (t.termType === 'BlankNode') return `_:${t.value}`;
  if (t.termType === 'Literal') {
    const value = JSON.stringify(t.value);
    if (t.language) return `${value}@${t.language}`;
    const dt = t.datatype && t.datatype.value;
    if (dt && dt !== 'http://www.w3.org/2001/XMLSchema#string' &&
        dt !== 'http://www.w3.org/1999/02/22-rdf-syntax-ns#langString') {
      return `${value}^^<${dt}>`;
    }
    return value;
  }
  return String(t.value);
}

function readAll(stream) {
  if (typeof stream === 'string') return Promise.resolve(stream);
  return new Promise((resolve, reject) => {
    const items = [];
    stream.on('data', (d) => items.push(d));
    stream.on('end', () => resolve(items));
    stream.on('error', reject);
  });
}

async function text(stream) {
  const items = await readAll(stream);
  if (typeof items === 'string') return items;
  return items.map((c) => (Buffer.isBuffer(c) ? c.toString('utf8') : String(c))).join('');
}

async function rows(stream) {
  // SparqlJsonResultParser streams one bindings object per row
  const items = await readAll(stream);
  return items.map((b) => Object.keys(b).sort().map((k) => `${k}=${term(b[k])}`).join(' '))
      .sort();
}

function sortedLines(ntriples) {
  return ntriples.split('\n').map((l) => l.trim()).filter((l) => l).sort();
}

function selectPayload(query) {
  return new GetQueryPayload().setQuery(query).setQueryType(QueryType.SELECT)
      .setResponseType(RDFMimeType.SPARQL_RESULTS_JSON);
}

const quad = (s, p, o, g) => DataFactory.quad(DataFactory.namedNode(EX + s),
    DataFactory.namedNode(EX + p), o, g ? DataFactory.namedNode(EX + g) : undefined);
const lit = (v) => DataFactory.literal(v);

// ---- the steps ----

const STEPS = {
  // ServerClient
  'server-repository-ids': () => new ServerClient(new ServerClientConfig(serverUrl)
      .setTimeout(TIMEOUT)).getRepositoryIDs(),
  'server-has-repository': () => new ServerClient(new ServerClientConfig(serverUrl)
      .setTimeout(TIMEOUT)).hasRepository(repositoryId),
  'server-get-repository-size': async () => {
    const server = new ServerClient(new ServerClientConfig(serverUrl).setTimeout(TIMEOUT));
    const repo = await server.getRepository(repositoryId, repositoryConfig());
    return repo.getSize();
  },

  // writes
  // (graphdb.js 3.0.4 sends a literal without a language as "Alice"^^<xsd:string>, the
  // prefix unexpanded: a quirk of the client, so this one has a language; the README:
  // "To set a language the data type must be xsd:string")
  'add': () => repository.add(new AddStatementPayload()
      .setSubject(EX + 'alice').setPredicate(EX + 'name')
      .setObjectLiteral('Alice', 'xsd:string', 'en')),
  'add-iri-in-graph': () => repository.add(new AddStatementPayload()
      .setSubject(EX + 'alice').setPredicate(EX + 'knows').setObject(EX + 'bob')
      .setContext(EX + 'g1')),
  'add-quads': () => repository.addQuads([
    quad('bob', 'name', lit('Bob')),
    quad('bob', 'age', DataFactory.literal('42', DataFactory.namedNode(
        'http://www.w3.org/2001/XMLSchema#integer'))),
    quad('bob', 'name', lit('Robert'), 'g1'),
  ]),
  'upload-turtle': () => repository.upload(
      Readable.from([`<${EX}carol> <${EX}name> "Carol" .\n`]), RDFMimeType.TURTLE, null, null),
  'update': () => repository.update(new UpdateQueryPayload()
      .setQuery(`INSERT DATA { <${EX}dave> <${EX}name> "Dave" }`)
      .setContentType(QueryContentType.SPARQL_UPDATE)),
  'update-form': () => repository.update(new UpdateQueryPayload()
      .setQuery(`DELETE DATA { <${EX}dave> <${EX}name> "Dave" } ; ` +
                `INSERT DATA { <${EX}erin> <${EX}name> "Erin" }`)
      .setContentType(QueryContentType.X_WWW_FORM_URLENCODED)),
  'delete-statements-subject': () => repository.deleteStatements(`<${EX}carol>`),
  'delete-all': () => repository.deleteAllStatements(),

  // reads
  'query-select': async () => rows(await repository.query(selectPayload(
      `SELECT ?s ?name { ?s <${EX}name> ?name }`))),
  'query-select-form': async () => rows(await repository.query(selectPayload(
      `SELECT ?s ?name { ?s <${EX}name> ?name }`)
      .setContentType(QueryContentType.X_WWW_FORM_URLENCODED))),
  'query-select-sparql-query': async () => rows(await repository.query(selectPayload(
      `SELECT ?s ?name { ?s <${EX}name> ?name }`)
      .setContentType(QueryContentType.SPARQL_QUERY))),
  // text/boolean (the README's ASK): graphdb.js has no parser for it, so the raw answer
  'query-ask': async () => (await text(await repository.query(new GetQueryPayload()
      .setQuery(`ASK { <${EX}alice> <${EX}name> "Alice"@en }`).setQueryType(QueryType.ASK)
      .setResponseType(RDFMimeType.BOOLEAN_RESULT)))).trim(),
  // SPARQL JSON results, parsed by graphdb.js's SparqlJsonResultParser to a boolean
  'query-ask-json': () => repository.query(new GetQueryPayload()
      .setQuery(`ASK { <${EX}alice> <${EX}name> "Nobody" }`).setQueryType(QueryType.ASK)
      .setResponseType(RDFMimeType.SPARQL_RESULTS_JSON)),
  'query-construct': async () => sortedLines(await text(await repository.query(
      new GetQueryPayload()
          .setQuery(`CONSTRUCT { ?s <${EX}called> ?n } WHERE { ?s <${EX}name> ?n }`)
          .setQueryType(QueryType.CONSTRUCT).setResponseType(RDFMimeType.N_TRIPLES)))),
  'get-statements': async () => sortedLines(await text(await repository.get(
      new GetStatementsPayload().setResponseType(RDFMimeType.N_QUADS)))),
  'get-statements-subject': async () => sortedLines(await text(await repository.get(
      new GetStatementsPayload().setResponseType(RDFMimeType.N_TRIPLES)
          .setSubject(`<${EX}bob>`)))),
  'size': () => repository.getSize(),
  'size-context': () => repository.getSize(`<${EX}g1>`),

  // namespaces
  'save-namespace': () => repository.saveNamespace('ex', EX),
  'save-namespace-2': () => repository.saveNamespace('foaf', 'http://xmlns.com/foaf/0.1/'),
  'get-namespaces': async () => (await repository.getNamespaces())
      .map((n) => `${n.getPrefix()}=${n.getNamespace().value}`).sort(),
  'get-namespace': async () => (await repository.getNamespace('ex')).value,
  'delete-namespace': () => repository.deleteNamespace('foaf'),
  'delete-namespaces': () => repository.deleteNamespaces(),

  // a transaction
  'tx-begin': async () => {
    transaction = await repository.beginTransaction();
    transaction.registerParser(new SparqlJsonResultParser());
    return transaction.isActive();
  },
  'tx-add': () => transaction.add(new AddStatementPayload()
      .setSubject(EX + 'tx').setPredicate(EX + 'name').setObject(EX + 'added')),
  'tx-add-quads': () => transaction.addQuads([quad('tx', 'name', lit('quad in tx'), 'g2')]),
  'tx-update': () => transaction.update(new UpdateQueryPayload()
      .setQuery(`INSERT DATA { <${EX}tx> <${EX}name> "updated in tx" }`)
      .setContentType(QueryContentType.X_WWW_FORM_URLENCODED)),
  'tx-delete-data': () => transaction.deleteData(`<${EX}alice> <${EX}name> "Alice"@en .`),
  'tx-size': () => transaction.getSize(),
  'tx-query': async () => rows(await transaction.query(selectPayload(
      `SELECT ?name { <${EX}tx> <${EX}name> ?name }`))),
  'tx-get': async () => sortedLines(await text(await transaction.get(
      new GetStatementsPayload().setResponseType(RDFMimeType.N_TRIPLES)
          .setSubject(`<${EX}tx>`)))),
  'tx-commit': async () => {
    await transaction.commit();
    return transaction.isActive();
  },
  'tx-rollback': async () => {
    await transaction.rollback();
    return transaction.isActive();
  },
};

async function failure(err) {
  const response = err && err.response;
  let body = null;
  if (response && response.data !== undefined) {
    try {
      body = await text(response.data);
    } catch (e) {
      body = String(response.data);
    }
  }
  return {status: response ? response.status : null,
    error: err && err.message ? err.message : String(err), body};
}

async function main() {
  for (const step of steps) {
    const run = STEPS[step];
    let out;
    if (!run) {
      out = {step, ok: false, status: null, error: `unknown step ${step}`, body: null};
    } else {
      try {
        const value = await run();
        out = {step, ok: true, value: value === undefined ? null : value};
      } catch (err) {
        out = {step, ok: false, ...(await failure(err))};
      }
    }
    process.stdout.write(JSON.stringify(out) + '\n');
  }
}

main().catch((err) => {
  process.stderr.write(String(err && err.stack || err) + '\n');
  process.exit(2);
});
