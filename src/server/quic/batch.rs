//! How many datagrams one send and one receive call carry.
//!
//! With segmentation offload (GSO), one `sendmsg` carries up to 64 datagrams, but the kernel
//! builds them as one UDP datagram first, so their total is bounded by the largest UDP
//! payload of IPv4, 65,507 bytes; a batch over it fails with EMSGSIZE, which quinn-udp
//! swallows: every datagram of the batch is lost. 64 full 1,452-byte packets are 92,928.

/// The largest UDP payload of IPv4 (65,535 minus the IP and UDP headers); IPv6 allows 20
/// bytes more, and one limit keeps it simple.
const MAX_SEND_BYTES: usize = 65_507;

/// The kernel coalesces at most 64 KiB of segments into one GRO read.
const MAX_GRO_BYTES: usize = 64 << 10;

/// Datagrams of `mtu` bytes one send may carry when the socket takes `gso` segments.
pub(super) fn segments_per_send(gso: usize, mtu: u16) -> usize {
    (MAX_SEND_BYTES / usize::from(mtu).max(1)).clamp(1, gso.max(1))
}

/// Bytes one receive buffer needs for datagrams of up to `payload` bytes when the socket
/// coalesces up to `gro` of them.
pub(super) fn receive_buffer(payload: usize, gro: usize) -> usize {
    payload.saturating_mul(gro).min(MAX_GRO_BYTES).max(payload)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_stays_under_the_largest_udp_payload() {
        assert_eq!(segments_per_send(64, 1452), 45);
        assert_eq!(segments_per_send(64, 1200), 54);
        assert_eq!(segments_per_send(10, 1452), 10);
        // One datagram at least, even one of the largest size or without GSO.
        assert_eq!(segments_per_send(64, 65_527), 1);
        assert_eq!(segments_per_send(1, 1452), 1);
        assert_eq!(segments_per_send(64, 16_384), 3);
    }

    #[test]
    fn receive_buffers_hold_one_coalesced_read() {
        assert_eq!(receive_buffer(1500, 64), 64 << 10);
        assert_eq!(receive_buffer(1500, 1), 1500);
        assert_eq!(receive_buffer(65_527, 64), 65_536);
        assert_eq!(receive_buffer(65_527, 1), 65_527);
    }
}
