-- A private CA (PEM) for the https endpoints ClueCDC calls itself: a Connect cluster's REST URL
-- and a webhook's URL. When set, that client trusts only this CA; otherwise the built-in roots.
ALTER TABLE connect_clusters ADD COLUMN tls_ca_certificate TEXT;
ALTER TABLE webhooks ADD COLUMN tls_ca_certificate TEXT;
