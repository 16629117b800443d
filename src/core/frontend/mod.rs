//! Network frontends over the one `Engine`: the KServe v2 HTTP/REST API
//! (`http`). Each maps `ErrorKind` to its protocol's status in one table.

pub mod http;
