package io.cluecdc.connect;

import java.util.Map;

import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.connect.connector.ConnectRecord;
import org.apache.kafka.connect.transforms.predicates.Predicate;

/**
 * A marker, not a feature: this jar's presence on a worker's {@code plugin.path}, visible in
 * {@code GET /connector-plugins?connectorsOnly=false} (config providers are not listed there).
 *
 * <p>ClueCDC's provider check asks each worker to resolve a probe reference. When no call arrives,
 * the worker either lacks this jar or has it without the {@code config.providers} lines; this
 * class tells the two apart. As a predicate it is harmless if someone uses it: it never matches.
 */
public final class ClueCdcInstalled<R extends ConnectRecord<R>> implements Predicate<R> {

    @Override
    public ConfigDef config() {
        return new ConfigDef();
    }

    @Override
    public boolean test(R record) {
        return false;
    }

    @Override
    public void close() {
    }

    @Override
    public void configure(Map<String, ?> configs) {
    }
}
