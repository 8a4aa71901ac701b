//! `cloak audit`: what each scheme's storage server can learn, measured.
//!
//! The adversary of the Cloak paper's §5 game picks two workloads; the scheme serves each in
//! process while the server's view is recorded ([`record`], [`view`]). Then:
//!
//! - [`distinguish`]: statistics the server computes from its view (reuse-distance sets, label
//!   frequencies, write-to-read distances, addresses, sizes, timing, batch intervals and
//!   write-back delays, the clear headers of written elements, reuse of elements followed
//!   through write-backs), each judged by a chi-square test and a distinguishing advantage,
//!   between the two workloads and between the scheme idle and loaded;
//! - [`attack`]: attacks that name the key behind each access (frequency analysis, a
//!   correlated-query attack in the spirit of IHOP, a linking attack that follows elements by
//!   their headers, [`links`]), scored against ground truth the auditor alone knows
//!   ([`truth`]), and a volume check under different loads;
//! - [`report`]: the schemes side by side, as a table, Markdown, HTML and plots.
//!
//! Everything works from the recorded view and the scheme's name, so schemes added later are
//! audited with no change here.

pub mod attack;
pub mod audit;
pub mod distinguish;
pub mod links;
pub mod record;
pub mod report;
pub mod stats;
pub mod truth;
pub mod view;

pub use audit::{AuditError, AuditReport, Game, SchemeAudit, Workloads, audit_scheme, baseline};
pub use record::Setup;
