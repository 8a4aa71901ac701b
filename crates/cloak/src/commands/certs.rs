//! `cloak certs`: a test CA and certificates for a quick TLS start.

use anyhow::Context;
use cloak_storage::tls::certs;

use crate::cli::CertsArgs;

pub fn run(args: CertsArgs) -> anyhow::Result<()> {
    let names: Vec<&str> = args.names.iter().map(String::as_str).collect();
    let files = certs::write_quick_start(&args.output, &names)
        .with_context(|| format!("cannot make certificates in {}", args.output.display()))?;
    let [ca, server_cert, server_key, client_cert, client_key] = [
        &files.ca,
        &files.server.0,
        &files.server.1,
        &files.client.0,
        &files.client.1,
    ]
    .map(|path| path.display().to_string());
    println!(
        "A test CA and certificates, valid for a year, are in {}:",
        args.output.display()
    );
    println!("  {ca}   the CA: clients trust it, listeners check client certificates with it");
    println!("  {server_cert} {server_key}   for the proxy's clients and for cloak server");
    println!("  {client_cert} {client_key}   for clients, and for the proxy towards cloak server");
    println!("For example:");
    println!(
        "  cloak server --tls-cert {server_cert} --tls-key {server_key} --client-ca {ca} \\\n      \
         --listen 0.0.0.0:7000"
    );
    println!(
        "  cloak proxy --storage tls://HOST:7000 --storage-ca {ca} --storage-cert {client_cert} \\\n      \
         --storage-key {client_key} --tls-cert {server_cert} --tls-key {server_key} --password …"
    );
    println!("  redis-cli --tls --cacert {ca} -p 6380 -a …");
    Ok(())
}
