//! `pilot_conflict_*`: what listener generation left out, counted over a snapshot.

use std::collections::BTreeSet;

use super::XdsSnapshot;
use crate::xds::metrics::ListenerConflicts;

impl XdsSnapshot {
    /// The listener conflicts of this snapshot (`pilot_conflict_*`): the outbound listeners
    /// the sidecar scopes generated so far could not give their services, each listener
    /// counted once however many scopes met it, and the workload addresses whose services
    /// claim one port with different protocols.
    ///
    /// Counted again only after a scope's listeners were generated: every listener push asks.
    pub fn listener_conflicts(&self) -> ListenerConflicts {
        let mut counted = self.conflicts.lock().unwrap_or_else(|e| e.into_inner());
        *counted.get_or_insert_with(|| self.count_listener_conflicts())
    }

    fn count_listener_conflicts(&self) -> ListenerConflicts {
        let mut tcp_over_tcp = BTreeSet::new();
        let mut tcp_over_http = BTreeSet::new();
        self.listeners.for_each_value(|v| {
            tcp_over_tcp.extend(v.conflicts.tcp_over_tcp.iter().cloned());
            tcp_over_http.extend(v.conflicts.tcp_over_http.iter().cloned());
        });
        ListenerConflicts {
            inbound: self.instances().conflicts(),
            tcp_over_tcp: tcp_over_tcp.len(),
            tcp_over_http: tcp_over_http.len(),
            http_over_tcp: 0,
        }
    }
}
