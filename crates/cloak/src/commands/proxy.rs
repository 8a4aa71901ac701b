//! `cloak proxy`: the trusted proxy in front of a storage server.

use anyhow::{Context, bail};
use cloak_proxy::ProxyOptions;
use tokio::net::TcpListener;

use crate::backend;
use crate::cli::ProxyArgs;
use crate::config::ConfigFile;
use crate::store::load_key;

pub async fn run(args: ProxyArgs, config: &ConfigFile) -> anyhow::Result<()> {
    let store = config.merge(&args.store, &["store"])?.resolve()?;
    let args = config.merge(&args, &["proxy"])?;
    let Some(master) = load_key(args.key_file.as_deref())? else {
        bail!(
            "no encryption key: pass --key-file FILE (make one with `cloak keygen -o cloak.key`) \
             or set CLOAK_KEY"
        );
    };
    let Some(url) = args.storage.as_deref() else {
        bail!("no storage: pass --storage {}", backend::SCHEMES);
    };
    let storage = backend::connect(url, args.storage_connections.unwrap_or(4)).await?;
    let engine = store.engine(&master)?;
    let summary = store.summary(&engine);
    let listen = args.listen.as_deref().unwrap_or("127.0.0.1:6380");
    let listener = TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    let options = ProxyOptions {
        password: args.password,
        drain_timeout: None,
        journal: None,
    };
    cloak_proxy::run(
        listener,
        engine,
        storage,
        options,
        |proxy| {
            println!(
                "cloak proxy listening on {} ({summary}; storage {url})",
                proxy.local_addr
            )
        },
        super::shutdown_signal(),
    )
    .await?;
    Ok(())
}
