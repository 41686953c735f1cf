package kafka

import (
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/strata-log/strata/broker/group"
)

// groupCodes are the coordinator's errors as Kafka codes, tried in order
// before codeOf (some wrap group.ErrInvalid, which codeOf maps to
// INVALID_REQUEST).
var groupCodes = []struct {
	err  error
	code int16
}{
	{group.ErrInvalidGroupID, kerr.InvalidGroupID.Code},
	{group.ErrInvalidSessionTimeout, kerr.InvalidSessionTimeout.Code},
	{group.ErrInconsistentGroupProtocol, kerr.InconsistentGroupProtocol.Code},
	{group.ErrMemberIDRequired, kerr.MemberIDRequired.Code},
	{group.ErrIllegalGeneration, kerr.IllegalGeneration.Code},
	{group.ErrRebalanceInProgress, kerr.RebalanceInProgress.Code},
	{group.ErrFencedInstanceID, kerr.FencedInstanceID.Code},
	{group.ErrUnreleasedInstanceID, kerr.UnreleasedInstanceID.Code},
	{group.ErrUnsupportedAssignor, kerr.UnsupportedAssignor.Code},
	{group.ErrInvalidRegularExpression, kerr.InvalidRegularExpression.Code},
	{group.ErrGroupSubscribedToTopic, kerr.GroupSubscribedToTopic.Code},
	{group.ErrOffsetMetadataTooLarge, kerr.OffsetMetadataTooLarge.Code},
	{group.ErrNotFound, kerr.GroupIDNotFound.Code},
	{group.ErrGroupNotEmpty, kerr.NonEmptyGroup.Code},
	{group.ErrUnknownPartition, kerr.UnknownTopicOrPartition.Code},
	{group.ErrPartitionNotHeld, kerr.StaleMemberEpoch.Code},
	{group.ErrUnknownMember, kerr.UnknownMemberID.Code},
	{group.ErrFencedMemberEpoch, kerr.FencedMemberEpoch.Code},
	{group.ErrStaleMemberEpoch, kerr.StaleMemberEpoch.Code},
	{group.ErrGroupMaxSize, kerr.GroupMaxSizeReached.Code},
	{group.ErrLimitExceeded, kerr.GroupMaxSizeReached.Code},
	{group.ErrLoading, kerr.CoordinatorLoadInProgress.Code},
	{group.ErrClosed, kerr.NotCoordinator.Code},
}

// groupCodeOf is codeOf for the group APIs.
func groupCodeOf(err error) int16 {
	for _, g := range groupCodes {
		if errors.Is(err, g.err) {
			return g.code
		}
	}
	return codeOf(err)
}

// kerrGroupIDNotFound is GROUP_ID_NOT_FOUND's code, for switches.
var kerrGroupIDNotFound = kerr.GroupIDNotFound.Code
