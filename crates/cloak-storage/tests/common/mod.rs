//! What the storage tests share.

use cloak_storage::tls::ServerTls;
use cloak_storage::tls::certs::{QuickStart, write_quick_start};
use cloak_storage::tls::server::ServerTlsFiles;

/// Quick-start certificates written to `dir`, and a TLS listener's setup with its server
/// certificate (asking clients for none).
pub fn quick_start_tls(dir: &std::path::Path) -> (QuickStart, ServerTls) {
    let files = write_quick_start(dir, &[]).unwrap();
    let tls = ServerTls::load(ServerTlsFiles {
        cert: files.server.0.clone(),
        key: files.server.1.clone(),
        client_ca: None,
    })
    .unwrap();
    (files, tls)
}
