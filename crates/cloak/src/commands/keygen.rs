//! `cloak keygen`: a fresh key from the operating system's CSPRNG.

use std::io::Write;

use anyhow::Context;
use cloak_crypto::MasterKey;

use crate::cli::KeygenArgs;

pub fn run(args: KeygenArgs) -> anyhow::Result<()> {
    let key = MasterKey::generate()?;
    let text = format!("{}\n", key.to_hex());
    match args.output {
        None => std::io::stdout().write_all(text.as_bytes())?,
        Some(path) => {
            let mut options = std::fs::OpenOptions::new();
            options.write(true).create_new(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
            let mut file = options.open(&path).with_context(|| {
                format!("cannot create {} (it must not exist yet)", path.display())
            })?;
            file.write_all(text.as_bytes())?;
            eprintln!("wrote a new key to {}", path.display());
        }
    }
    Ok(())
}
