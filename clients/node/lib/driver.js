// The seam between the package and the client library: a driver sends one
// command on the shared client, routed by its key, and opens connections of
// its own for blocking commands (LOCK.ACQUIRE … WAIT, LOCK.OBSERVE).
//
//   send(key, args)      -> Promise of the reply (error replies rejected as
//                           node-redis' ErrorReply or this package's ServerError)
//   dedicated(key)       -> Promise of { send(args), close() }: a connection
//                           of its own, to the server that owns key, that never
//                           reconnects; close() makes a pending send reject.
//
// A driver for a cluster adds, so that the package keeps one session lease
// per master (LOCK.LEASE has no key, and a lease lives on one node):
//
//   node(key)            -> the id of the master that serves key now
//   sendTo(node, args)   -> Promise of the reply of one command on that master
//
// Without them, LOCK.LEASE goes through send(undefined, args), as to one
// server.
//
// node-redis 4 clients (createClient) and clusters (createCluster) are
// recognised; anything else with send() and dedicated() is taken as a driver.
"use strict";

const { keySlot } = require("./slot");

function driverFor(client) {
  if (client && typeof client.send === "function" && typeof client.dedicated === "function") {
    return client;
  }
  if (client && typeof client.getSlotMaster === "function" && typeof client.sendCommand === "function") {
    return clusterDriver(client);
  }
  if (client && typeof client.duplicate === "function" && typeof client.sendCommand === "function") {
    return clientDriver(client);
  }
  throw new TypeError("Locks needs a node-redis 4 client (createClient), cluster (createCluster) or a driver");
}

// A node-redis client pipelines every command on one connection: a WAIT there
// would hold up everything behind it, so waits get a duplicate of their own.
function clientDriver(client) {
  return {
    send: (key, args) => client.sendCommand(args),
    dedicated: () => connectOwn(client),
  };
}

// A cluster routes by the first key and follows MOVED and ASK (and reads
// its slot map again after a MOVED); a dedicated connection goes to the
// master that owns the key's slot now, and so does a session's LOCK.LEASE.
function clusterDriver(cluster) {
  return {
    send: (key, args) => cluster.sendCommand(key, false, args),
    dedicated: (key) => connectOwn(cluster.getSlotMaster(keySlot(key)).client),
    node: (key) => cluster.getSlotMaster(keySlot(key)).id,
    sendTo: async (node, args) => {
      const master = cluster.getMasters().find((m) => m.id === node);
      if (!master) throw new Error(`the cluster has no master ${node} now`);
      return master.client.sendCommand(args);
    },
  };
}

// A duplicate of `client` that never reconnects (a re-sent WAIT would queue
// again, at the tail) and has no offline queue.
async function connectOwn(client) {
  const socket = { ...(client.options && client.options.socket), reconnectStrategy: () => new Error("a dedicated connection does not reconnect") };
  const own = client.duplicate({ socket, disableOfflineQueue: true });
  own.on("error", () => {}); // a failed command rejects its own promise
  await own.connect();
  return {
    send: (args) => own.sendCommand(args),
    close: async () => {
      try {
        await own.disconnect();
      } catch {
        // already closed
      }
    },
  };
}

module.exports = { driverFor };
