//! Where each item of a [`Programming`](super::Programming) came from, so that a kernel refusal
//! at apply time can name the file and line a proxier (or a replay capture) wrote it on.

use super::Table;
use crate::scenario::IpFamily;
use std::collections::BTreeMap;
use std::fmt;

/// A line of an input file (or of a command's stdout), 1-based.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Origin {
    pub file: String,
    pub line: usize,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.file, self.line)
    }
}

/// One addressable item of a `Programming`, by position.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Item {
    Chain {
        table: Table,
        index: usize,
    },
    Rule {
        table: Table,
        index: usize,
    },
    Set {
        set: usize,
    },
    SetEntry {
        set: usize,
        entry: usize,
    },
    Service {
        service: usize,
    },
    Destination {
        service: usize,
        destination: usize,
    },
    Address {
        index: usize,
    },
    Sysctl {
        key: String,
    },
    IpvsTimeouts,
    /// The `--delete-others` line of one family.
    IpvsDeleteOthers(IpFamily),
    /// The `--clear` line.
    IpvsClear,
    ConntrackCleanup {
        index: usize,
    },
    /// A line of the `*nft` script, 0-based.
    NftLine {
        index: usize,
    },
}

/// Item -> origin. Items without an entry were not read from text (e.g. built in Rust).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SourceMap(BTreeMap<Item, Origin>);

impl SourceMap {
    pub fn insert(&mut self, item: Item, origin: Origin) {
        self.0.insert(item, origin);
    }

    pub fn get(&self, item: &Item) -> Option<&Origin> {
        self.0.get(item)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&Item, &Origin)> {
        self.0.iter()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Adds `other`'s entries; used when one programming is assembled from several files whose
    /// items do not overlap.
    pub fn extend(&mut self, other: SourceMap) {
        self.0.extend(other.0);
    }
}
