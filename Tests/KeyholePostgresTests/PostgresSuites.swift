import Testing

/// Every suite that starts PostgreSQL clusters, one test at a time: each starts a cluster (initdb, a
/// server) and the whole package's tests run at once on two cores, where a crowd of clusters would
/// make other suites' deadlines fail.
@Suite("PostgreSQL", .serialized)
enum PostgresSuites {}
