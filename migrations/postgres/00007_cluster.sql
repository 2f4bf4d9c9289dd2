-- +goose Up
-- Several aspd nodes on one database (docs/cluster.md). Each process start
-- registers a node with a random id and heartbeats it; a node whose
-- heartbeat is older than --cluster-node-expiry is dead, and a surviving
-- node expires its connections.
CREATE TABLE nodes (
    id           TEXT PRIMARY KEY,
    addr         TEXT NOT NULL DEFAULT '',
    started_at   BIGINT NOT NULL,
    heartbeat_at BIGINT NOT NULL
);

-- Network-wide presence: one row per (agent, node) while the node holds at
-- least one live connection of the agent. An agent is online while any row
-- of it exists; the rows are written in the transaction that decides
-- session.disconnected / session.reconnected, under the agent's presence
-- row lock, so that decision is made once for the network.
CREATE TABLE node_connections (
    handle  TEXT NOT NULL,
    node_id TEXT NOT NULL,
    since   BIGINT NOT NULL,
    PRIMARY KEY (handle, node_id)
);
CREATE INDEX node_connections_node ON node_connections (node_id);

-- +goose Down
DROP TABLE node_connections;
DROP TABLE nodes;
