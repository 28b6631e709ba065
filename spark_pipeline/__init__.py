"""Bulk load and audit on Spark (issue "data pipeline"): ``txcluster load``, ``txcluster audit``.

Theory of operation
-------------------
A job is extract (IO) -> pure transforms (DataFrame in, DataFrame out) -> load (IO);
configuration is passed in (``jobs.LoadConfig``, ``audit.AuditConfig``, ``ParseConfig``).

    extract.py    input files listed on the driver through Hadoop (local paths and
                  URLs: hdfs://, s3a://); line formats read by Spark's text source as
                  raw bytes, split by line across tasks; documents one per task (from a
                  URL by Spark's binaryFile source); a replica's content exported as
                  N-Quads from a worker's API
    locations.py  what a location means: a local path (file:) or a Hadoop URL, and
                  the name an input file goes by (pure)
    hadoop_fs.py  Hadoop's FileSystem API on Spark's JVM, through py4j: list, stat,
                  create directories, write reports (rejects, the audit) to URLs
    rdf.py        the per-record work, plain Python: line-exact validation, canonical
                  terms (rdfcore.canonical), per-file blank node scopes, relative IRIs
                  against --base-iri, the documents' prefixes
    transform.py  the pure transforms: parse (mapInArrow), rejects with line numbers
                  across splits, deduplication, fingerprint sums in 32-bit pieces (ANSI
                  mode on), differences between replicas, N-Quads documents to send;
                  a failing task names its file and lines (TaskFailure)
    load.py       the cluster: transactions through the master (RDF4J adds with
                  preserveNodeId), or --initial's bulk load of one worker that the
                  master's new log adopts; namespaces; waiting for every worker; the
                  check
    jobs.py       the load wired together (and the helpers the audit shares): its
                  report, the documents' prefixes as namespaces, failed tasks named
    audit.py      the audit: two replicas' exports compared in Spark
    session.py    the SparkSession: local[*] by default, any cluster by its URL
    shipping.py   what a cluster's executors need, shipped: the code zip, a packed Python
    progress.py   the progress line (files, lines, quads parsed and rejected, rate, ETA;
                  quads loaded; the verification)

The proof of a load is the repository fingerprint (rdfcore/fingerprint.py: the
sum mod 2**128 of xxh3-128 of each canonical N-Quads line), computed by the job over the
data set and by every worker over its store: after ``--initial`` every worker must hold
the job's fingerprint; after a load into a repository that held data, the fingerprint
must have moved by exactly the sum over the quads that were not there before (the job
reads the repository from an up-to-date worker to know them, and sends only those).
"""
