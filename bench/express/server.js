// The baseline of bench/http_load.sh: the same two routes as the api_gateway sample's /bench/*,
// with express-rate-limit (fixed window per client, draft-7 headers, JSON body).
const express = require('express');
const { rateLimit } = require('express-rate-limit');

const app = express();
const options = { windowMs: 60000, standardHeaders: 'draft-7', legacyHeaders: false };
app.get('/bench/ok', rateLimit({ ...options, limit: 1e9 }), (req, res) => res.json({ ok: true }));
app.get('/bench/limited', rateLimit({ ...options, limit: 10 }), (req, res) => res.json({ ok: true }));

const server = app.listen(0, '127.0.0.1', () => {
  console.log(`listening on http://127.0.0.1:${server.address().port}`);
});
process.on('SIGTERM', () => server.close(() => process.exit(0)));
