/*
 * An agent driven by the npm client `@elastic/opamp-client-node`, for skyconf's OpAMP tests.
 *
 * usage: node node_agent.js URL SERVICE INTERVAL_SECONDS [HOLD_SECONDS]
 *
 * It declares AcceptsRemoteConfig and ReportsRemoteConfig (ReportsStatus and ReportsHeartbeat
 * are always on), applies every remote configuration it receives (application/json files must
 * parse), reports APPLIED or FAILED with the configuration's hash, and prints one JSON line per
 * event on stdout. With HOLD_SECONDS it sends `OpAMP-Hold: HOLD_SECONDS` on every request and
 * waits for response headers longer than that. It shuts down when stdin closes.
 *
 * Over TLS and with a token when the environment says so: OPAMP_TOKEN (sent as
 * `Authorization: Bearer`), OPAMP_CA (the CA bundle the server's certificate must chain to), and
 * OPAMP_CLIENT_CERT with OPAMP_CLIENT_KEY (a client certificate), all PEM file paths.
 */
'use strict';

const {subscribe} = require('diagnostics_channel');
const {
    createOpAMPClient,
    AgentCapabilities,
    RemoteConfigStatuses,
    DIAG_CH_SEND_FAIL,
    DIAG_CH_SEND_SUCCESS,
} = require('@elastic/opamp-client-node');

const [url, service, interval, hold] = process.argv.slice(2);

function emit(event, fields) {
    process.stdout.write(JSON.stringify({event, ...fields}) + '\n');
}

const hex = (bytes) => Buffer.from(bytes).toString('hex');

const options = {
    endpoint: url,
    capabilities:
        AgentCapabilities.AgentCapabilities_AcceptsRemoteConfig |
        AgentCapabilities.AgentCapabilities_ReportsRemoteConfig,
    heartbeatIntervalSeconds: Number(interval),
    diagEnabled: true,
    onMessage: ({remoteConfig}) => {
        if (!remoteConfig) {
            return;
        }
        const hash = remoteConfig.configHash;
        const files = {};
        let error = null;
        for (const [name, file] of Object.entries(remoteConfig.config.configMap)) {
            const body = Buffer.from(file.body).toString('utf8');
            if (file.contentType === 'application/json') {
                try {
                    files[name] = JSON.parse(body);
                } catch (err) {
                    error = `${name}: ${err.message}`;
                }
            } else {
                files[name] = body;
            }
        }
        if (error) {
            client.setRemoteConfigStatus({
                lastRemoteConfigHash: hash,
                status: RemoteConfigStatuses.RemoteConfigStatuses_FAILED,
                errorMessage: error,
            });
            emit('failed', {hash: hex(hash), error});
        } else {
            client.setRemoteConfigStatus({
                lastRemoteConfigHash: hash,
                status: RemoteConfigStatuses.RemoteConfigStatuses_APPLIED,
            });
            emit('applied', {hash: hex(hash), files});
        }
    },
};
const {readFileSync} = require('fs');
const env = process.env;
options.headers = {};
if (env.OPAMP_TOKEN) {
    options.headers['Authorization'] = `Bearer ${env.OPAMP_TOKEN}`;
}
if (env.OPAMP_CA) {
    options.connect = {ca: readFileSync(env.OPAMP_CA)};
    if (env.OPAMP_CLIENT_CERT) {
        options.connect.cert = readFileSync(env.OPAMP_CLIENT_CERT);
        options.connect.key = readFileSync(env.OPAMP_CLIENT_KEY);
    }
}
if (hold) {
    options.headers['OpAMP-Hold'] = hold;
    // The client's side of the promise: it waits longer than the hold.
    options.headersTimeout = (Number(hold) + 10) * 1000;
    options.bodyTimeout = (Number(hold) + 10) * 1000;
}

const client = createOpAMPClient(options);
subscribe(DIAG_CH_SEND_FAIL, (msg) => emit('send_failed', {error: String(msg.err)}));
subscribe(DIAG_CH_SEND_SUCCESS, () => emit('sent', {}));
client.setAgentDescription({
    identifyingAttributes: {'service.name': service},
    nonIdentifyingAttributes: {'host.name': 'interop-host'},
});
client.start();
emit('started', {instance_uid: hex(client.getInstanceUid())});

process.stdin.resume();
process.stdin.on('end', async () => {
    // shutdown() waits for a request in flight, which may be a held poll: give it a moment,
    // not the whole hold.
    await Promise.race([client.shutdown(), new Promise((resolve) => setTimeout(resolve, 200))]);
    emit('stopped', {});
    process.exit(0);
});
