package server

import (
	"github.com/prometheus/client_golang/prometheus"
)

// clusterCollector exposes the cluster node's counters (docs/cluster.md);
// on a single node (the embedded store) it exposes nothing.
type clusterCollector struct{ s *Server }

var clusterDescs = struct {
	peers, notifySent, notifySkipped, notifyReceived, remoteEvents, catchUps, catchUpWakes, listenerResets *prometheus.Desc
}{
	peers:          prometheus.NewDesc("aspd_cluster_peers", "Other aspd nodes registered on the database, as this node last counted them (0: it sends no wake-ups).", nil, nil),
	notifySkipped:  prometheus.NewDesc("aspd_cluster_notify_skipped_total", "Commits not announced because no other node was registered.", nil, nil),
	notifySent:     prometheus.NewDesc("aspd_cluster_notify_sent_total", "NOTIFY statements sent to wake the other nodes (one per coalesced batch of commits).", nil, nil),
	notifyReceived: prometheus.NewDesc("aspd_cluster_notify_received_total", "Wake-up notifications received from other nodes.", nil, nil),
	remoteEvents:   prometheus.NewDesc("aspd_cluster_remote_events_total", "Events committed on other nodes, read once and handed to this node's delivery.", nil, nil),
	catchUps:       prometheus.NewDesc("aspd_cluster_catchups_total", "Catch-up passes (every --cluster-poll and at each listener reconnect).", nil, nil),
	catchUpWakes:   prometheus.NewDesc("aspd_cluster_catchup_wakes_total", "Sessions a catch-up found ahead of what this node had announced.", nil, nil),
	listenerResets: prometheus.NewDesc("aspd_cluster_listener_connects_total", "(Re)connections of the dedicated LISTEN connection.", nil, nil),
}

func (clusterCollector) Describe(ch chan<- *prometheus.Desc) {
	d := clusterDescs
	for _, x := range []*prometheus.Desc{d.peers, d.notifySent, d.notifySkipped, d.notifyReceived, d.remoteEvents, d.catchUps, d.catchUpWakes, d.listenerResets} {
		ch <- x
	}
}

func (c clusterCollector) Collect(ch chan<- prometheus.Metric) {
	n := c.s.app.Node()
	if n == nil {
		return
	}
	st := n.Stats()
	d := clusterDescs
	ch <- prometheus.MustNewConstMetric(d.peers, prometheus.GaugeValue, float64(n.Peers()))
	for _, m := range []struct {
		desc *prometheus.Desc
		v    int64
	}{{d.notifySent, st.NotifySent.Load()}, {d.notifySkipped, st.NotifySkipped.Load()}, {d.notifyReceived, st.NotifyReceived.Load()}, {d.remoteEvents, st.RemoteEvents.Load()},
		{d.catchUps, st.CatchUps.Load()}, {d.catchUpWakes, st.CatchUpWakes.Load()}, {d.listenerResets, st.ListenerResets.Load()}} {
		ch <- prometheus.MustNewConstMetric(m.desc, prometheus.CounterValue, float64(m.v))
	}
}
